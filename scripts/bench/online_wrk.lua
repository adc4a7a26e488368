-- wrk script of online_vs_feast.sh (the cross-check of oha's closed-loop numbers):
-- POSTs the JSON bodies of a file (one a line, the path after `--`) in turn, each
-- thread from its own random start; other headers (Authorization) come from -H.
-- done() prints one JSON line: requests, seconds, non-2xx, socket errors, percentiles.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

local bodies = {}
local i = 0
local threads = 0

function setup(thread)
  threads = threads + 1
  thread:set("id", threads)
end

function init(args)
  for line in io.lines(args[1]) do
    bodies[#bodies + 1] = line
  end
  math.randomseed(os.time() + 7919 * (id or 0))
  i = math.random(#bodies)
end

function request()
  i = i % #bodies + 1
  return wrk.format(nil, nil, nil, bodies[i])
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "seconds": %.3f, "non2xx": %d, "connect": %d, "read": %d, "write": %d, "timeout": %d, ' ..
      '"p50_ms": %.3f, "p99_ms": %.3f, "max_ms": %.3f}\n',
    summary.requests, summary.duration / 1e6, e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50) / 1e3, latency:percentile(99) / 1e3, latency.max / 1e3))
end
