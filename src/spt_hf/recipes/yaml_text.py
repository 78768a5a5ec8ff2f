"""The YAML reader of recipes, task files and search spaces: `yaml.safe_load` refusing a key given twice. Only yaml
is imported here, so a command that reads a task file (`spt-hf inspect`) does not import transformers for it."""

import yaml


class DuplicateKeyError(ValueError):
    """A YAML mapping names a key twice (`lines`: where, 1-based); YAML itself would keep the last value silently."""

    def __init__(self, key: str, lines: tuple[int, int]):
        super().__init__(f"key `{key}` is given twice, on lines {lines[0]} and {lines[1]}")
        self.key, self.lines = key, lines


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping that names a key twice."""

    def construct_mapping(self, node, deep=False):
        lines: dict[str, int] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                line = key_node.start_mark.line + 1
                if key_node.value in lines:
                    raise DuplicateKeyError(key_node.value, (lines[key_node.value], line))
                lines[key_node.value] = line
        return super().construct_mapping(node, deep)


def load_yaml(text: str):
    """`yaml.safe_load`, except that a key given twice in a mapping raises DuplicateKeyError."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: plain data only
