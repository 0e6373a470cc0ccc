-- wrk script for bench/web-pages.sh: a random experiment page of the web load example's lab
-- (RUNS experiments, `load/lab#<k>`), the same paths on glassbox and on nginx.
local runs = tonumber(os.getenv("RUNS") or "10000")
local thread_no = 0

function setup(thread)
  thread_no = thread_no + 1
  thread:set("seed", thread_no)
end

function init(args)
  math.randomseed(seed * 7919)
end

function request()
  local k = math.random(0, runs - 1)
  return wrk.format("GET", "/experiments/load/lab%23" .. k)
end
