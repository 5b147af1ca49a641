"""Files in and out: the text parser and reader, the binary cache, prediction output."""
