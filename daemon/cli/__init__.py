"""The command line: `storyd <command>`, a door that renders the API layer's results."""
