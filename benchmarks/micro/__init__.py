"""pytest-benchmark micro-benchmarks (parser, env step, filter, MI proxies); run with
`python -m benchmarks.micro.run`."""
