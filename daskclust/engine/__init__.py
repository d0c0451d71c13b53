"""The Dask engine: clusters, per-worker shards holding chunks and state, passes and tree merges."""
