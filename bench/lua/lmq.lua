-- LMQ HTTP load for wrk, one connection per wrk thread (wrk -t N -c N), so that the Lua
-- globals below are that connection's state machine.
--   wrk ... -s lmq.lua URL -- MODE QUEUE QUOTA BODY_BYTES PULL_T PRODUCERS MARKER_DIR
-- MODE push:   each connection pushes QUOTA messages.
-- MODE drain:  each connection pulls (t=PULL_T) and acks until the queue answers empty or it
--              has acked QUOTA messages.
-- MODE steady: the first PRODUCERS connections push QUOTA messages each, the others pull and
--              ack until QUOTA messages each, or until an empty answer (after waiting PULL_T
--              seconds) to a pull sent once every producer was done. An empty answer while
--              producers still push does not mean drained: the original LMQ's queue hands
--              messages to waiting pulls only when its process is idle, so under push load a
--              pull may answer 204 while the queue is full. The markers are looked at only on
--              a 204; the first 204 that finds them all is followed by one more pull, since it
--              may have been answered before the last push.
-- MODE cycle:  each connection repeats push, pull (t=PULL_T), ack until it has acked QUOTA
--              messages (one cycle per ack); an empty pull (another connection of a shared
--              queue took the message) goes back to the push.
-- A pull answer that carries x-lmq-message-id is a message (whatever its status, so that a
-- no-op responder adding that header runs the very same requests). A connection that is done
-- writes MARKER_DIR/<thread id> and stops; the driver interrupts wrk when all are done.
local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clk, bench_timespec *ts);
]]
local tsbuf = ffi.new("bench_timespec")
local function now()
  ffi.C.clock_gettime(1, tsbuf) -- CLOCK_MONOTONIC
  return tonumber(tsbuf.tv_sec) + tonumber(tsbuf.tv_nsec) * 1e-9
end

local threads = {}
local nthreads = 0

function setup(thread)
  nthreads = nthreads + 1
  thread:set("tid", nthreads)
  table.insert(threads, thread)
end

-- per connection (per thread) state, read by done() through thread:get
tid = 0
pushed = 0
acked = 0
empties = 0
bad = 0
t_first = 0
t_last = 0
finished = 0

local mode, queue, quota, body, pull_t, producers, marker_dir
local role, state, inflight, msg_id
local producers_seen = 0 -- producers 1..producers_seen are known to be done (markers stay)
local all_pushed = false -- every producer is known done (so the pull in flight was sent after)
local push_req, pull_req

function init(args)
  mode = args[1]
  queue = args[2]
  quota = tonumber(args[3])
  body = string.rep("x", tonumber(args[4]))
  pull_t = args[5]
  producers = tonumber(args[6])
  marker_dir = args[7]
  if mode == "push" or (mode == "steady" and tid <= producers) then
    role = "producer"
  else
    role = "consumer"
  end
  state = mode == "cycle" and "push" or "pull"
  push_req = wrk.format("POST", "/messages/" .. queue, { ["Content-Type"] = "application/octet-stream" }, body)
  pull_req = wrk.format("GET", "/messages/" .. queue .. "?t=" .. pull_t)
end

-- True once MARKER_DIR holds the marker of every producer (thread ids 1..PRODUCERS).
local function producers_done()
  while producers_seen < producers do
    local f = io.open(marker_dir .. "/" .. (producers_seen + 1), "r")
    if not f then return false end
    f:close()
    producers_seen = producers_seen + 1
  end
  return true
end

local function finish()
  if finished == 0 then
    finished = 1
    local f = io.open(marker_dir .. "/" .. tid, "w")
    if f then f:close() end
  end
  wrk.thread:stop()
end

function request()
  if finished == 1 then
    -- wrk may ask once more before the stop takes effect: something that changes no queue
    return wrk.format("GET", "/bench-finished")
  end
  if t_first == 0 then t_first = now() end
  if role == "producer" or state == "push" then
    inflight = "push"
    return push_req
  end
  if state == "ack" then
    inflight = "ack"
    return wrk.format("POST", "/messages/" .. queue .. "/" .. msg_id .. "?reply=ack")
  end
  inflight = "pull"
  return pull_req
end

local function header(headers, name)
  local v = headers[name]
  if v then return v end
  for k, val in pairs(headers) do
    if string.lower(k) == name then return val end
  end
  return nil
end

function response(status, headers, _)
  if finished == 1 then
    return
  elseif inflight == "push" then
    if status >= 200 and status < 300 then
      pushed = pushed + 1
      t_last = now()
    else
      bad = bad + 1
    end
    if mode == "cycle" then
      state = "pull"
    elseif pushed >= quota then
      finish()
    end
  elseif inflight == "pull" then
    local id = header(headers, "x-lmq-message-id")
    if id then
      msg_id = id
      state = "ack"
    elseif status == 204 then
      empties = empties + 1
      if mode == "cycle" then
        state = "push"
      elseif mode ~= "steady" or all_pushed then
        finish()
      else
        all_pushed = producers_done()
      end
    else
      bad = bad + 1
    end
  else
    state = mode == "cycle" and "push" or "pull"
    if status >= 200 and status < 300 then
      acked = acked + 1
      t_last = now()
      if acked >= quota then finish() end
    else
      bad = bad + 1
    end
  end
end

function done(summary, latency, _)
  local p, a, e, b, done_n = 0, 0, 0, 0, 0
  local first, last = nil, 0
  for _, t in ipairs(threads) do
    p = p + t:get("pushed")
    a = a + t:get("acked")
    e = e + t:get("empties")
    b = b + t:get("bad")
    done_n = done_n + t:get("finished")
    local tf, tl = t:get("t_first"), t:get("t_last")
    if tf > 0 and (first == nil or tf < first) then first = tf end
    if tl > last then last = tl end
  end
  io.write(string.format(
    'BENCH {"pushed":%d,"acked":%d,"empties":%d,"bad":%d,"finished":%d,"threads":%d,' ..
    '"span":%.6f,"requests":%d,"wrk_errors":%d,"p50_us":%d,"p99_us":%d,"p999_us":%d,"max_us":%d}\n',
    p, a, e, b, done_n, #threads, (first and last > first) and (last - first) or 0,
    summary.requests, summary.errors.connect + summary.errors.read + summary.errors.write +
    summary.errors.status + summary.errors.timeout,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), latency.max))
end
