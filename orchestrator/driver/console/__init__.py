"""What the command line shows and checks: its flags (`cli_checks`), destinations (`destinations`) and the
study it is asked to run or continue (`study_guard`) before anything starts, the progress line while a
sweep runs (`progress`), and the library noise it silences (`quiet`)."""
