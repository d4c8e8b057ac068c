import {
  EXTEND_LUA,
  luaScript,
  LEASE_LUA,
  LINE_PLACES,
  TELL_LUA,
  WRITEBACK_LUA,
} from './rw-lua.js';

/**
 * Lua shared by the semaphore scripts. A semaphore's permits are numbered
 * slots, 1 to N, each a lock of its own: the holders hash
 * `<lock key>:sem` maps slot -> 'value expiry token' (expiry in ms of the
 * node's clock), so that a quorum grants one slot, and two permits valid at
 * once are never the same slot (the plain lock's quorum argument, per slot).
 * Counting holders per node instead would not do: with 3 nodes and 2
 * permits, grants on {1,2}, {2,3} and {1,3} leave each node at 2 while three
 * permits are valid.
 */
const SEM_PRELUDE = `${LEASE_LUA}local function permits(key, clock)
  local live = entries(key, clock)
  for i, e in ipairs(live) do
    live[i] = { slot = tonumber(e.field), value = e.tag, expiry = e.expiry, token = tonumber(e.token) }
  end
  return live
end
local function mine(e, slot) return e.tag == ARGV[1] and e.field == slot end
`;

/**
 * Take a permit on one node.
 * KEYS: holders hash, waiters' line, fence counter (the semaphore's
 * `<lock key>:fence`, or the node's counter for all resources).
 * ARGV: value, permits N, ttl ms, fencing '1' | '0', seed, counter ttl ms
 * ('0': none), slot hint ('0': none), then optionally waiter id, arrival,
 * line lease ms, notify '1' | 's' | '0', sender.
 * Returns {1, slot, token} when granted ({1, slot} without fencing), {0, ms
 * until the first live permit ends} when all N are taken, {0, -3} when a
 * permit is free but earlier waiters take the free ones, and {0, -3, heads}
 * when this waiter has just joined the line then: permits are free while
 * the waiters ahead are not asking (each waits for a release it may have
 * missed), so the message a release would send names the first of them, one
 * per free permit, and goes out (published, and returned for this process's
 * own waiters, whom the channel does not tell). Once per waiter and node.
 *
 * A permit is granted while fewer than N live permits stand on the node
 * (whatever slots they hold: after N was lowered, permits above it count
 * too) and fewer earlier waiters (by arrival; a caller without one ranks
 * after the whole line) than free permits. The slot: the hint when free (a
 * split vote taught the caller which slot most nodes offered), else the k-th
 * free slot from 1 where k is the caller's rank in the line: the same slot
 * on every node whatever order concurrent waiters reach it in, so their
 * votes do not split.
 */
export const SEM_ACQUIRE = luaScript(
  'sem-acquire',
  `local value, n, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local hint = tonumber(ARGV[7])
local waiter, arrival, lease = ARGV[8] or '', tonumber(ARGV[9]), tonumber(ARGV[10]) or 0
local clock = now()
local live, taken, soonest = permits(KEYS[1], clock), {}, nil
for _, p in ipairs(live) do
  if p.value == value then
    if ARGV[4] == '1' then return {1, p.slot, p.token} end
    return {1, p.slot}
  end
  taken[p.slot] = true
  if not soonest or p.expiry - clock < soonest then soonest = p.expiry - clock end
end
local ahead = {}
local places = redis.call('HGETALL', KEYS[2])
for i = 1, #places, 2 do
  local a, expiry = string.match(places[i + 1], '^(%S+) (%d+)$')
  a, expiry = tonumber(a), tonumber(expiry)
  if not expiry or expiry <= clock then
    redis.call('HDEL', KEYS[2], places[i])
  elseif places[i] ~= waiter and (not arrival or a < arrival or (a == arrival and places[i] < waiter)) then
    ahead[#ahead + 1] = { id = places[i], arrival = a }
  end
end
local rank = #ahead
local free = n - #live
if free <= 0 or rank >= free then
  local joined = false
  if lease > 0 and waiter ~= '' then
    local placed = redis.call('HEXISTS', KEYS[2], waiter) == 1
    if placed or redis.call('HLEN', KEYS[2]) < ${LINE_PLACES} then
      redis.call('HSET', KEYS[2], waiter, string.format('%s %d', ARGV[9], clock + lease))
      cover(KEYS[2], lease)
      joined = not placed
    end
  end
  if free <= 0 then return {0, soonest} end
  if not joined then return {0, -3} end
  table.sort(ahead, function(x, y)
    return x.arrival < y.arrival or (x.arrival == y.arrival and x.id < y.id)
  end)
  local heads = {}
  for i = 1, free do heads[i] = ahead[i].id end
  heads = table.concat(heads, ',')
  if ARGV[11] and ARGV[11] ~= '0' then
    ${TELL_LUA}tell(KEYS[1], heads, ARGV[11], ARGV[12] or '')
  end
  return {0, -3, heads}
end
local slot
if hint and hint >= 1 and hint <= n and not taken[hint] then
  slot = hint
else
  local k = rank
  for s = 1, n do
    if not taken[s] then
      if k == 0 then slot = s break end
      k = k - 1
    end
  end
end
if waiter ~= '' then redis.call('HDEL', KEYS[2], waiter) end
local token = 0
if ARGV[4] == '1' then
  token = increment(KEYS[3], ARGV[5], ARGV[6])
end
redis.call('HSET', KEYS[1], slot, string.format('%s %d %d', value, clock + ttl, token))
cover(KEYS[1], ttl)
if ARGV[4] == '1' then return {1, slot, token} end
return {1, slot}`,
  SEM_PRELUDE,
);

/** Second fencing round of a permit (WRITEBACK_LUA; the slot is ARGV[4]). */
export const SEM_WRITEBACK = luaScript('sem-writeback', WRITEBACK_LUA, SEM_PRELUDE);

/** Renew one permit's lease, only while it is live in its slot (EXTEND_LUA; the slot is ARGV[3]). */
export const SEM_EXTEND = luaScript('sem-extend', EXTEND_LUA, SEM_PRELUDE);

/**
 * Give back whatever slot the value holds here (the permit, or a slot a
 * split vote left behind), then, when anyone waits, tell the waiters: the
 * message names the earliest waiters in line by arrival, one per slot freed
 * (comma-separated), so that only they ask again; with nobody in line yet it
 * names none, and every waiter that hears it asks.
 * KEYS: holders hash, waiters' line. ARGV: value, notify '1' | 's' | '0',
 * sender. Returns 1 when a slot was ours and is now free, else 0.
 */
export const SEM_RELEASE = luaScript(
  'sem-release',
  `local entries, removed = redis.call('HGETALL', KEYS[1]), 0
for i = 1, #entries, 2 do
  if string.match(entries[i + 1], '^(%S+) ') == ARGV[1] then
    removed = removed + redis.call('HDEL', KEYS[1], entries[i])
  end
end
if removed > 0 and ARGV[2] ~= '0' and redis.call('EXISTS', KEYS[2]) == 1 then
  local clock, line = now(), {}
  local places = redis.call('HGETALL', KEYS[2])
  for i = 1, #places, 2 do
    local a, expiry = string.match(places[i + 1], '^(%S+) (%d+)$')
    if tonumber(expiry) and tonumber(expiry) > clock then
      line[#line + 1] = { id = places[i], arrival = tonumber(a) }
    end
  end
  table.sort(line, function(x, y)
    return x.arrival < y.arrival or (x.arrival == y.arrival and x.id < y.id)
  end)
  local heads = {}
  for i = 1, math.min(removed, #line) do heads[i] = line[i].id end
  ${TELL_LUA}tell(KEYS[1], table.concat(heads, ','), ARGV[2], ARGV[3] or '')
end
return math.min(removed, 1)`,
  SEM_PRELUDE,
);

export const SEMAPHORE_SCRIPTS = [SEM_ACQUIRE, SEM_WRITEBACK, SEM_EXTEND, SEM_RELEASE] as const;
