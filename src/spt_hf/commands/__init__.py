"""The commands of `spt-hf`, one module each, as accelerate's `accelerate/commands/`: a module's `add_parsers`
declares its command's options and names its handler, `handler(args, rest) -> int` runs it (`rest`: the trailing
`--key value` recipe overrides of the commands that take them). `spt_hf.cli` registers them and handles errors.

Handlers import torch, transformers and the training code inside themselves, so that building the parser (and
`spt-hf --help`) loads none of them.
"""
