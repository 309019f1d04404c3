"""`storyd top`'s live view (the `tui` extra, Textual): a door like the command line,
reading only storyd.api. Never imported on `storyd resume`."""
