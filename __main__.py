from anydev.cli import entry

entry()
