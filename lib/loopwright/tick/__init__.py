"""One tick's I/O shell: observe what a Stop needs, let the core decide, apply the effects."""
