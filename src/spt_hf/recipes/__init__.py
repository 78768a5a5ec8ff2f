"""Recipes: the YAML files shipped in this folder (`<task>/<arch>-<phase>.yaml`, `cpu/`, `accelerate/`), their schema
(`arguments`), how a recipe is found, read and checked (`loading`), task files (`task_file`) and model-size presets
(`presets`)."""
