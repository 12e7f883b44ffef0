"""What the command line shows and checks: its flags (`cli_checks`) and destinations (`destinations`)
before anything starts, the progress line while a sweep runs (`progress`), and the library noise it
silences (`quiet`)."""
