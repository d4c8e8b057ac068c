import { createHash } from 'node:crypto';
import type { LuaScript } from './lua-scripts.js';

/**
 * Builds a lock script. Every script returns at once when called without
 * keys: that is how a connection loads it (EVAL caches a script, and needs
 * no SCRIPT permission) before it serves any call, see ALL_SCRIPTS and
 * LockNode. It lives here, not in lua-scripts.ts, because lua-scripts.ts
 * lists this file's scripts in ALL_SCRIPTS: building them there would be an
 * import cycle.
 */
export function luaScript(name: string, body: string, prelude = ''): LuaScript {
  const source = 'if #KEYS == 0 then return 0 end\n' + prelude + body;
  return Object.freeze({
    name,
    source,
    sha: createHash('sha1').update(source).digest('hex'),
    body,
  });
}

/**
 * The channel of an engine's own waiters: `<keyPrefix>waiters:<sender>`.
 * Under the key prefix, so that an ACL granting `&<keyPrefix>*` covers it.
 */
export function waitersChannel(keyPrefix: string, sender: string): string {
  return `${keyPrefix}waiters:${sender}`;
}

/**
 * Lua shared by the release scripts: `tell(key, head, mode, sender)` tells
 * the waiters of `key` that it is free (mode '1': PUBLISH, 's': SPUBLISH).
 * `head` names the waiters first in line (comma-separated), '' for none.
 *
 * A waiter named `<sender>.<n>` belongs to the engine whose releases carry
 * that sender, and that engine listens on a channel of its own (see
 * waitersChannel; the key prefix is what precedes the key's '{'). A release
 * whose named waiters all have such names goes to their engines' channels
 * only, as '<head> <key>', and to none when they are the releasing engine's
 * own (it woke them itself): one delivery per node to the one process that
 * acts on it, where the key's channel reaches every process that waits for
 * the key. Any other release (nobody named, a name without an engine, as
 * older versions give, or a cluster's SPUBLISH, whose channel must lie in
 * the key's slot) goes to the key's channel as '<head> <sender>'.
 */
export const TELL_LUA = `local function tell(key, head, mode, sender)
  local prefix = mode == '1' and head ~= '' and string.match(key, '^([^{]*){')
  local engines = prefix and {}
  if engines then
    for name in string.gmatch(head, '[^,]+') do
      local engine = string.match(name, '^([^.]+)%.')
      if not engine then engines = nil break end
      engines[#engines + 1] = engine
    end
  end
  if not engines then
    redis.pcall(mode == 's' and 'SPUBLISH' or 'PUBLISH', key, head .. ' ' .. sender)
    return
  end
  local told = { [sender] = true }
  for _, engine in ipairs(engines) do
    if not told[engine] then
      told[engine] = true
      redis.pcall('PUBLISH', prefix .. 'waiters:' .. engine, head .. ' ' .. key)
    end
  end
end
`;

/** The most waiters a line keeps a place for on a node (as the plain lock's MAX_LINE). */
export const LINE_PLACES = 64;

/**
 * Lua shared by the read-write and semaphore scripts: `now()` reads the
 * node's clock in ms (TIME: these scripts need it, unlike the plain lock's
 * line, which is optional); `cover()` makes a key live at least `ms` more;
 * `setCounter()` writes a fence counter with its TTL (ARGV[counterTtl] '0':
 * none); `raise()` lifts it to a token found elsewhere, never lowers it;
 * `increment()` counts a grant: a counter that does not exist starts at the
 * seed (a clock reading past any earlier token), as the plain lock's does.
 *
 * Both keep their holders in one hash per resource, field -> 'tag expiry
 * token' (a read-write lock: holder value -> mode; a semaphore: slot ->
 * holder value), expiry in ms of the node's clock. `entries()` prunes the
 * expired ones and returns the live ones as {field, tag, expiry, token}
 * (the token as written, a decimal string).
 */
export const LEASE_LUA = `local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function cover(key, ms)
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
end
local function setCounter(key, value, ttl)
  if ttl == '0' then redis.call('SET', key, value) else redis.call('SET', key, value, 'PX', ttl) end
end
local function raise(key, token, ttl)
  if (tonumber(redis.call('GET', key)) or 0) < tonumber(token) then setCounter(key, token, ttl) end
end
local function increment(key, seed, ttl)
  local token = redis.call('INCR', key)
  if token == 1 and seed ~= '0' then
    setCounter(key, seed, ttl)
    return tonumber(seed)
  end
  return token
end
local function entries(key, clock)
  local all, live = redis.call('HGETALL', key), {}
  for i = 1, #all, 2 do
    local tag, expiry, token = string.match(all[i + 1], '^(%S+) (%d+) (%d+)$')
    expiry = tonumber(expiry)
    if not expiry or expiry <= clock then
      redis.call('HDEL', key, all[i])
    else
      live[#live + 1] = { field = all[i], tag = tag, expiry = expiry, token = token }
    end
  end
  return live
end
`;

/**
 * The body of a second fencing round, the same for read-write locks and
 * semaphores: raise the counter to the chosen token and record it in the
 * caller's entry, only while that entry is live. `mine(entry, slot)` comes
 * from the primitive's prelude. KEYS: holders hash, fence counter. ARGV:
 * value, counter ttl ms ('0': none), token, then the slot (semaphores).
 * Returns 1 when written, 0 when the entry is gone here.
 */
export const WRITEBACK_LUA = `for _, e in ipairs(entries(KEYS[1], now())) do
  if mine(e, ARGV[4]) then
    raise(KEYS[2], ARGV[3], ARGV[2])
    redis.call('HSET', KEYS[1], e.field, string.format('%s %d %s', e.tag, e.expiry, ARGV[3]))
    return 1
  end
end
return 0`;

/**
 * The body of an extension, the same for read-write locks and semaphores:
 * renew the caller's entry only while it is live (one that expired is never
 * re-created). KEYS: holders hash. ARGV: value, ttl ms, then the slot
 * (semaphores). Returns 1 when renewed, 0 when the entry is gone here.
 */
export const EXTEND_LUA = `local clock, ttl = now(), tonumber(ARGV[2])
for _, e in ipairs(entries(KEYS[1], clock)) do
  if mine(e, ARGV[3]) then
    redis.call('HSET', KEYS[1], e.field, string.format('%s %d %s', e.tag, clock + ttl, e.token))
    cover(KEYS[1], ttl)
    return 1
  end
end
return 0`;

/**
 * A resource's holders live in one hash, `<lock key>:rw`, value -> 'mode
 * expiry token' (mode 'r' or 'w', expiry in ms of the node's clock): every
 * reader has its own lease, renewed and pruned on its own, so a crashed
 * reader holds writers off only until its own lease ends. The hash's TTL
 * covers its longest lease and is only a backstop. `holders()` prunes the
 * expired entries and returns the live ones as {value, mode, expiry, token}.
 */
const RW_PRELUDE = `${LEASE_LUA}local function holders(key, clock)
  local live = entries(key, clock)
  for i, e in ipairs(live) do
    live[i] = { value = e.field, mode = e.tag, expiry = e.expiry, token = tonumber(e.token) }
  end
  return live
end
local function mine(e) return e.field == ARGV[1] end
`;

/**
 * Take a resource for reading ('r') or writing ('w') on one node.
 * KEYS: holders hash, waiters' line, fence counter (the resource's
 * `<lock key>:fence`, or the node's counter for all resources).
 * ARGV: value, mode, ttl ms, fencing '1' | '0', seed, counter ttl ms ('0':
 * none), then optionally waiter id, arrival, line lease ms (a first attempt
 * leaves them out and does not join the line).
 * Returns {1, token} when granted ({1} without fencing), {0, ms until the
 * blocking holders' leases end} when held, {0, -3} when free for us but an
 * earlier waiter comes first.
 *
 * Who goes first: the line is a hash waiter id -> 'arrival expiry mode'. A
 * writer goes only when no other live waiter arrived before it (ties: the
 * lower id); a reader only when no writer waiting arrived before it, so
 * readers that queued ahead of a writer are served together, a writer is
 * never overtaken by readers that came after it, and readers behind a writer
 * go once that writer is done. Arrivals come from the caller, the same on
 * every node, so the nodes agree on the order. A caller with no arrival (a
 * first attempt) ranks after everyone in line.
 *
 * Tokens: a writer increments the counter (a counter that does not exist
 * starts at `seed`, as for the plain lock), so its token is above every token
 * issued before it on the node; a reader takes the counter as it stands (the
 * last write's token, or a write attempt's since), without raising it, so
 * every later writer's token is above it. A resend finds its own entry and
 * gets the same token back.
 */
export const RW_ACQUIRE = luaScript(
  'rw-acquire',
  `local value, mode, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local waiter, arrival, lease = ARGV[7] or '', tonumber(ARGV[8]), tonumber(ARGV[9]) or 0
local clock = now()
local blocked = -1
for _, h in ipairs(holders(KEYS[1], clock)) do
  if h.value == value then
    if ARGV[4] == '1' then return {1, h.token} end
    return {1}
  end
  if mode == 'w' or h.mode == 'w' then blocked = math.max(blocked, h.expiry - clock) end
end
local function before(a, id)
  if not arrival then return true end
  return a < arrival or (a == arrival and id < waiter)
end
local ahead = false
local places = redis.call('HGETALL', KEYS[2])
for i = 1, #places, 2 do
  local a, expiry, m = string.match(places[i + 1], '^(%S+) (%d+) (%a)$')
  a, expiry = tonumber(a), tonumber(expiry)
  if not expiry or expiry <= clock then
    redis.call('HDEL', KEYS[2], places[i])
  elseif places[i] ~= waiter and (mode == 'w' or m == 'w') and before(a, places[i]) then
    ahead = true
  end
end
if blocked >= 0 or ahead then
  if lease > 0 and waiter ~= '' then
    if redis.call('HEXISTS', KEYS[2], waiter) == 1 or redis.call('HLEN', KEYS[2]) < ${LINE_PLACES} then
      redis.call('HSET', KEYS[2], waiter, string.format('%s %d %s', ARGV[8], clock + lease, mode))
      cover(KEYS[2], lease)
    end
  end
  if blocked >= 0 then return {0, blocked} end
  return {0, -3}
end
if waiter ~= '' then redis.call('HDEL', KEYS[2], waiter) end
local token = 0
if ARGV[4] == '1' and mode == 'w' then
  token = increment(KEYS[3], ARGV[5], ARGV[6])
elseif ARGV[4] == '1' then
  token = tonumber(redis.call('GET', KEYS[3]))
  if not token then
    token = tonumber(ARGV[5])
    if token > 0 then setCounter(KEYS[3], ARGV[5], ARGV[6]) end
  end
end
redis.call('HSET', KEYS[1], value, string.format('%s %d %d', mode, clock + ttl, token))
cover(KEYS[1], ttl)
if ARGV[4] == '1' then return {1, token} end
return {1}`,
  RW_PRELUDE,
);

/** Second fencing round of a read or write grant (WRITEBACK_LUA). */
export const RW_WRITEBACK = luaScript('rw-writeback', WRITEBACK_LUA, RW_PRELUDE);

/** Renew one holder's lease (EXTEND_LUA). */
export const RW_EXTEND = luaScript('rw-extend', EXTEND_LUA, RW_PRELUDE);

/**
 * Drop one holder's entry, then, when anyone waits in the line, tell the
 * waiters (a message on the holders key's channel, PUBLISH or SPUBLISH as
 * for the plain lock; pcall for the same reasons). The message names no
 * waiter first (' ' then the sender): several readers may be admitted at
 * once, so every waiter that hears it asks, and the nodes' line decides.
 * KEYS: holders hash, waiters' line. ARGV: value, notify '1' | 's' | '0',
 * sender. Returns 1 when our entry was there and is now deleted, else 0.
 */
export const RW_RELEASE = luaScript(
  'rw-release',
  `local removed = redis.call('HDEL', KEYS[1], ARGV[1])
if removed == 1 and ARGV[2] ~= '0' and redis.call('EXISTS', KEYS[2]) == 1 then
  ${TELL_LUA}tell(KEYS[1], '', ARGV[2], ARGV[3] or '')
end
return removed`,
);

export const RW_SCRIPTS = [RW_ACQUIRE, RW_WRITEBACK, RW_EXTEND, RW_RELEASE] as const;
