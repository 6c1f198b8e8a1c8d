"""The attention library: layouts, masks and the softmax family, the functional core, the cells,
query-chunked and fused (C++) attention. Imports nothing above it."""
