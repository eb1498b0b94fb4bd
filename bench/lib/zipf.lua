-- wrk script of bench/cache_zipf.sh: every request is GET PREFIX<k>, with
-- the key k in 0 .. KEYS-1 drawn from a Zipf law, P(k) = (k+1)^-S / H(KEYS, S)
-- (k = 0 the most popular), by inverse transform on a cumulative table
-- made once per thread (KEYS floats). The draws come from LuaJIT's
-- math.random seeded with SEED + the thread's index, so every server gets
-- the same sequence of keys (the interleaving of the connections aside).
--
--   wrk -t1 -c32 -d20s -s bench/lib/zipf.lua URL -- KEYS S SEED [PREFIX]
--
-- Each answer is classed by what its cache said: ScalWS's Cache-Status
-- (RFC 9211; its last member, the cache nearest the client): "hit", or
-- "fwd=<reason>" (fwd=miss, fwd=stale, ...); nginx's X-Cache
-- ($upstream_cache_status): "hit", "miss", "expired", ...; "none" when
-- neither header came. At the end: report.lua's BENCH line, then
--   ZIPF responses=N non200=N
--   ZIPFCLASS <class> <count>        (one line per class seen)

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(here .. "report.lua")
local bench_done = done

local threads = {}
local cdf, n, prefix

-- per thread (read back by done() through thread:get)
counts = {}
responses = 0
non200 = 0

function setup(thread)
  thread:set("index", #threads)
  table.insert(threads, thread)
end

function init(args)
  n = tonumber(args[1]) or 100000
  local s = tonumber(args[2]) or 1.0
  local seed = tonumber(args[3]) or 1
  prefix = args[4] or "/cache/zipf/"
  cdf = {}
  local sum = 0
  for i = 1, n do
    sum = sum + i ^ -s
    cdf[i] = sum
  end
  for i = 1, n do cdf[i] = cdf[i] / sum end
  math.randomseed(seed + 7919 * (index or 0))
end

local function draw()
  local u = math.random()
  local lo, hi = 1, n
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if cdf[mid] < u then lo = mid + 1 else hi = mid end
  end
  return lo - 1
end

function request()
  return wrk.format(nil, prefix .. draw())
end

local function class(headers)
  local cs, xc = headers["Cache-Status"], headers["X-Cache"]
  if not cs and not xc then
    for k, v in pairs(headers) do
      local lk = k:lower()
      if lk == "cache-status" then cs = v elseif lk == "x-cache" then xc = v end
    end
  end
  if cs then
    local last = cs:match("([^,]*)$"):gsub("^%s+", "")
    if last:find(";%s*hit%s*;") or last:find(";%s*hit%s*$") then return "hit" end
    local fwd = last:match(";%s*fwd=([%w%-]+)")
    return fwd and ("fwd=" .. fwd) or "other"
  end
  if xc then return xc:gsub("%s", ""):lower() end
  return "none"
end

function response(status, headers, body)
  responses = responses + 1
  if status ~= 200 then non200 = non200 + 1 end
  local c = class(headers)
  counts[c] = (counts[c] or 0) + 1
end

function done(summary, latency, requests)
  bench_done(summary, latency, requests)
  local all, total, bad = {}, 0, 0
  for _, t in ipairs(threads) do
    total = total + (t:get("responses") or 0)
    bad = bad + (t:get("non200") or 0)
    for k, v in pairs(t:get("counts") or {}) do all[k] = (all[k] or 0) + v end
  end
  io.write(string.format("ZIPF responses=%d non200=%d\n", total, bad))
  for k, v in pairs(all) do io.write(string.format("ZIPFCLASS %s %d\n", k, v)) end
end
