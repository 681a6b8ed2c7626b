"""Generation: policy models, backends and teachers. Heavy libraries are imported by submodules only."""
