"""Video: files decoded into frames (`decoding`), tracks across frames (`tracking`), and a video request's
run through the one pipeline entry (`job`)."""
