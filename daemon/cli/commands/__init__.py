"""One module per `storyd` subcommand, each with `main(argv) -> exit code`."""
