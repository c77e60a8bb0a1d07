"""Where requests run: offline vLLM engines, vLLM servers, the one cache of live backends,
their process watchdog, arrival processes and the memory pre-flight."""
