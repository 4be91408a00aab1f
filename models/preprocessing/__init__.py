"""What prepares a model's inputs without torch: tokenizers, the text framing of each kind (prompts, pairs, chat
templates, ColBERT roles) and media processors. The gateway runs these (usage counts are real tokens), and the model
services read the same settings."""
