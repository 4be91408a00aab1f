"""A query's inputs into model rows: fetching and decoding media, tokenizing through each model's preprocessor, and
cutting long texts into windows or chunks."""
