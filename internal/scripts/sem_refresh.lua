-- sem_refresh: extend token's permit if it is still live (a lease is never
-- shortened: see extend in common.lua).
-- KEYS[1] permits zset, KEYS[2] permit data
-- ARGV[1] token, ARGV[2] new ttl in ms
-- Returns 1 when extended, 0 when the token holds no live permit.
local now_ms = server_now()
if sem_extend(KEYS[1], KEYS[2], ARGV[1], ARGV[2], now_ms) then
  return 1
end
return 0
