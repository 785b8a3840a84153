# loader/: the companion library (built by its own rules below).
