"""The commands of `kbopt`, one module each (cli.py parses and imports only the one asked for):
advise, collect, report, fleet, schema, rules; common.py holds what several share."""
