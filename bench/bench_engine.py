"""Single-stream and concurrent throughput of tokenstep beside transformers and llama.cpp, one run.

    python bench/bench_engine.py [--dtype bfloat16] [--concurrency 32] [--mixed] [--peers transformers,llama.cpp]

The same as `tokenstep bench`. llama.cpp is optional: `pip install llama-cpp-python` (builds ~5 min).
"""

from tokenstep.benchmark.report import main

if __name__ == "__main__":
    main()
