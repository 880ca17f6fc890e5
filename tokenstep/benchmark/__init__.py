"""Benchmarks: tokenstep beside its peers (transformers, llama.cpp) on the same workload, as ratios.

Used by `tokenstep bench` and the scripts in bench/. Peers are optional: a peer whose package is not
installed is skipped with a note (llama.cpp: `pip install llama-cpp-python`, ~5 min to build).
"""
