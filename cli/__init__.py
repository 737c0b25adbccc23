"""The ``anydev`` command line: the command table (``commands``) and one module per subcommand."""
