-- refresh_shared: extend a reader's lease if it is still a live reader
-- (never shortened: see extend_reader in common.lua).
-- KEYS[1] lock hash; ARGV[1] token, ARGV[2] new ttl in ms
-- Returns 1 when extended, 0 when token is not a live reader.
if extend_reader(KEYS[1], ARGV[1], ARGV[2], (server_now())) then
  return 1
end
return 0
