-- wrk script: at the end print one machine-readable line with exact
-- percentiles from wrk's latency histogram (µs) and the error counters.
-- "status" is wrk's count of answers with status >= 400 (non-2xx/3xx);
-- run.sh's preflight checks that every URL answers 200 with the expected
-- body, which excludes redirects before the load starts.
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d bytes=%d status=%d connect=%d read=%d write=%d timeout=%d " ..
    "p50_us=%d p90_us=%d p99_us=%d p999_us=%d max_us=%d mean_us=%.1f\n",
    summary.requests, summary.duration, summary.bytes, e.status, e.connect, e.read, e.write,
    e.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max, latency.mean))
end
