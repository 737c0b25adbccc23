from anydev.cli.commands import entry

entry()
