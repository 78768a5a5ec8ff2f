"""spt-hf-lru: the LRU as an spt_hf architecture. spt_hf calls `register` through the entry point
`spt_hf.architectures: lru` when a command or recipe first names `lru`; code that builds models itself calls it."""

__version__ = "0.1.0"


def register():
    """Register the LRU with spt_hf (config, heads, Auto classes, presets); returns the registry entry."""
    import spt_hf

    from .modeling_lru import LRUConfig, LRUMixer

    return spt_hf.register_architecture(LRUConfig, LRUMixer, name="lru")
