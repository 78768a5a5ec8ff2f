"""spt_hf model code. This folder is shipped with every checkpoint as Hugging Face remote code: its files import
only torch, transformers and each other (relative imports), never `spt_hf` itself."""
