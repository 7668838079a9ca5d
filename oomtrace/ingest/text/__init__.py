"""What the text formats share: reading a file as chunks of lines (:mod:`.input_file`), the
outer prefixes supervisors put before an engine's own text (:mod:`.outer_prefixes`), a line's
own time in the forms logs print (:mod:`.timestamps`), and placing year-less, zone-less engine
times in UTC (:mod:`.yearless_clock`)."""
