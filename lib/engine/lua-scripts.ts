import { luaScript, RW_SCRIPTS, TELL_LUA } from './rw-lua.js';
import { SEMAPHORE_SCRIPTS } from './semaphore-lua.js';

/** A Lua script, run by SHA with a fallback to its source after SCRIPT FLUSH. */
export interface LuaScript {
  readonly name: string;
  readonly source: string;
  readonly sha: string;
  /** What the script does, without the load guard and prelude that its source begins with. */
  readonly body: string;
}

/**
 * Lua shared by ACQUIRE and RELEASE: the node's clock in ms (nil where TIME
 * is denied), and the earliest live waiter in a line (see ACQUIRE), nil when
 * none or HGETALL is denied; `prune` deletes the expired places on the way.
 * Each script defines these after its usual path has returned: Lua makes a
 * closure for each local function a script defines, on every call, and a
 * lone caller's grant and release need none of them (a few µs less of the
 * node's time per call).
 */
const LINE_LUA = `local function millis()
  local t = redis.pcall('TIME')
  if t.err then return nil end
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function earliest(line, now, prune)
  local entries = redis.pcall('HGETALL', line)
  if entries.err then return nil end
  local head, best
  for i = 1, #entries, 2 do
    local arrival, expiry = string.match(entries[i + 1], '^(%S+) (%S+)$')
    arrival, expiry = tonumber(arrival), tonumber(expiry)
    if not expiry or expiry <= now then
      if prune then redis.call('HDEL', line, entries[i]) end
    elseif not best or arrival < best or (arrival == best and entries[i] < head) then
      head, best = entries[i], arrival
    end
  end
  return head, best
end
`;

/**
 * The most waiters a lock's line keeps a place for on a node. Every attempt
 * on a contended lock reads the whole line, so its length bounds that cost;
 * waiters past it still retry and are served, in no set order among them.
 */
export const MAX_LINE = 64;

/**
 * Grant the lock on all resources or on none (one node).
 * KEYS: n lock keys, then optionally the node's fence counter: given, it
 * counts the tokens of every resource; else each resource has its own,
 * `<lock key>:fence` (a Redis Cluster, whose scripts reach one slot only).
 * ARGV: value, ttl ms, n, fencing '1' | '0', seed, counter ttl ms,
 * waiter id, arrival, waiter lease ms (the last three optional: a first
 * attempt leaves them out and so does not join the line).
 * Returns {1, token...} when granted, {0, pttl} when another value holds a
 * key, {0, -3} when the keys are free but an earlier waiter is first in line.
 *
 * A fence counter that does not exist starts at `seed` (a clock reading
 * scaled past any earlier token): INCR finds it missing by returning 1, one
 * call on the usual path instead of a SET NX before every INCR. A
 * resource's counter lives `counter ttl` ms (INCR keeps the TTL), the
 * node's counter for good. Seed '0' keeps counters forever,
 * counting from 1. Every grant on the node raises the node's counter, so a
 * token is above every earlier one of the node, whatever the resource: no
 * key per resource, nothing to expire (a token per node keeps a resource's
 * tokens rising across a quorum by the same argument as a counter per
 * resource: docs/fencing.md). A request resent after a reconnect
 * finds our own value and returns that grant's tokens instead of counting a
 * second one.
 *
 * Waiters' line: `<lock key>:q`, a hash of waiter id -> 'arrival expiry'.
 * A refused caller with a lease above 0 joins it (or renews its place) for
 * that many ms of this node's clock; free keys go to the waiter with the
 * earliest arrival (ties: the lower id) among the live ones and the caller
 * (in the line or not yet: a caller that arrived before all of them takes
 * the keys in the call that would have put it first), and a grant takes the
 * caller out of the line. A line keeps at most MAX_LINE places. A
 * caller refused for several keys keeps a place only in the lines of the keys
 * that someone else holds or waits for ahead of it, and leaves the others, so
 * that it never keeps a free key from callers that want that key alone.
 * Arrivals come from the caller, the same on every
 * node (when its wait began, on its clock corrected to the nodes' clocks at
 * connect, so that a process whose own clock is off neither jumps the line
 * nor starves), so all nodes agree on who is first and a quorum forms at once instead
 * of splitting its votes between waiters woken by the same release. The line
 * is optional: where the user may not run EXISTS, HGETALL, HSET, HDEL, HLEN,
 * HEXISTS or TIME
 * (an ACL), those calls fail quietly and waiters are served in no set order.
 */
export const ACQUIRE = luaScript(
  'acquire',
  `local value, n = ARGV[1], tonumber(ARGV[3])
local fencing, shared = ARGV[4] == '1', KEYS[n + 1]
local function fence(key)
  local token = redis.call('INCR', key)
  if token == 1 and ARGV[5] ~= '0' then
    if shared then
      redis.call('SET', key, ARGV[5])
    else
      redis.call('SET', key, ARGV[5], 'PX', ARGV[6])
    end
    return tonumber(ARGV[5])
  end
  return token
end
-- The usual grant, one key that nobody waits for, comes first: Lua makes a closure for every
-- local function a script defines, on every call, and this path needs only fence().
local lineFree = n == 1 and redis.pcall('EXISTS', KEYS[1] .. ':q') ~= 1
if lineFree and redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
  if fencing then return {1, fence(shared or (KEYS[1] .. ':fence'))} end
  return {1}
end
${LINE_LUA}local waiter, lease = ARGV[7] or '', tonumber(ARGV[9]) or 0
local function counter(i) return shared or (KEYS[i] .. ':fence') end
local queued, now = false, nil
local function clock()
  now = now or millis()
  return now
end
local function first(key)
  local line = key .. ':q'
  if redis.pcall('EXISTS', line) ~= 1 or not clock() then return true end
  queued = true
  local head, best = earliest(line, now, true)
  if head == nil or head == waiter then return true end
  -- Not in this line yet, or its place lapsed: first all the same if it arrived before the head.
  local arrival = tonumber(ARGV[8])
  return lease > 0 and arrival ~= nil and (arrival < best or (arrival == best and waiter < head))
end
local function room(line)
  if redis.pcall('HEXISTS', line, waiter) == 1 then return true end
  local places = redis.pcall('HLEN', line)
  return type(places) == 'number' and places < ${MAX_LINE}
end
local function refuse(pttl, wanted)
  if lease > 0 and waiter ~= '' and clock() then
    local place = (ARGV[8] or '0') .. ' ' .. (now + lease)
    for i = 1, n do
      local line = KEYS[i] .. ':q'
      if wanted and not wanted[i] then
        redis.pcall('HDEL', line, waiter)
      elseif room(line) then
        if type(redis.pcall('HSET', line, waiter, place)) ~= 'number' then break end
        if redis.call('PTTL', line) < lease then redis.call('PEXPIRE', line, lease) end
      end
    end
  end
  return {0, pttl}
end
local function granted()
  if queued then
    for i = 1, n do redis.call('HDEL', KEYS[i] .. ':q', waiter) end
  end
end
local reply = {1}
if n == 1 then
  -- With the line free, the SET above was this one, and refused.
  if not lineFree and first(KEYS[1]) and redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
    granted()
    if fencing then reply[2] = fence(counter(1)) end
    return reply
  end
  local holder = redis.call('GET', KEYS[1])
  if holder and holder ~= value then return refuse(redis.call('PTTL', KEYS[1])) end
  if not holder then return refuse(-3) end
  if fencing then reply[2] = tonumber(redis.call('GET', counter(1))) end
  return reply
end
local mine, held, holders = 0, nil, {}
for i = 1, n do
  local holder = redis.call('GET', KEYS[i])
  holders[i] = holder
  if holder == value then
    mine = mine + 1
  elseif holder then
    local pttl = redis.call('PTTL', KEYS[i])
    if not held or pttl > held then held = pttl end
  end
end
if mine == n then
  if fencing then
    for i = 1, n do reply[i + 1] = tonumber(redis.call('GET', counter(i))) end
  end
  return reply
end
-- Refused: keep a place only in the lines of keys someone else holds or waits for first, so
-- that a free key of this set is not kept from callers that want it alone.
local wanted, behind = {}, false
for i = 1, n do
  local other = holders[i] and holders[i] ~= value
  wanted[i] = other or not first(KEYS[i])
  if wanted[i] and not other then behind = true end
end
if held then return refuse(held, wanted) end
if behind then return refuse(-3, wanted) end
granted()
for i = 1, n do redis.call('SET', KEYS[i], value, 'PX', ARGV[2]) end
if fencing then
  for i = 1, n do reply[i + 1] = fence(counter(i)) end
end
return reply`,
);

/**
 * Second fencing round: raise each counter to the chosen token, only while
 * this node still holds our lock value on every key.
 * KEYS: n lock keys, then their n fence counters (the node's counter n
 * times where it counts the tokens of all resources).
 * ARGV: value, counter ttl ms ('0': forever), then n tokens.
 * Returns 1 when written, 0 when the lock is no longer ours here.
 */
export const FENCE_WRITEBACK = luaScript(
  'fence-writeback',
  `local n = #KEYS / 2
for i = 1, n do
  if redis.call('GET', KEYS[i]) ~= ARGV[1] then return 0 end
end
for i = 1, n do
  local token = tonumber(ARGV[i + 2])
  if (tonumber(redis.call('GET', KEYS[n + i])) or 0) < token then
    if ARGV[2] == '0' then
      redis.call('SET', KEYS[n + i], ARGV[i + 2])
    else
      redis.call('SET', KEYS[n + i], ARGV[i + 2], 'PX', ARGV[2])
    end
  end
end
return 1`,
);

/**
 * Renew the lease, only where every key still holds our value: a key that
 * expired is never re-created.
 * KEYS: the lock keys. ARGV: value, ttl ms.
 * Returns 1 when extended, 0 when the lock is not ours here.
 */
export const EXTEND = luaScript(
  'extend',
  `for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) ~= ARGV[1] then return 0 end
end
for i = 1, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
return 1`,
);

/**
 * Delete the keys that still hold our value, then tell waiters they are free
 * (a message on a channel named after the key). Publishing uses pcall: a user
 * without channel permissions (or a Redis 6 cluster, which has no SPUBLISH)
 * must still be able to release. On a Redis Cluster the message is sharded
 * (SPUBLISH: it stays on the key's shard) instead of broadcast to every node.
 * The message names the first live waiter in the key's line (empty when
 * none), so that only that waiter asks for the lock. Where that waiter's
 * name tells its engine, the message goes to that engine's own channel
 * alone, or nowhere when it is the releasing engine's (it woke its own
 * waiters already); otherwise to the key's channel, with the sender, so that
 * the releasing process can skip its own messages (see TELL_LUA).
 * No message when the key has no line: every waiter that listens joined the
 * line when it was refused and keeps its place while it waits (see ACQUIRE),
 * so nobody listens for an uncontended lock. Where the line cannot be read
 * (an ACL without EXISTS), the message always goes.
 * KEYS: the lock keys. ARGV: value, notify '1' (PUBLISH) | 's' (SPUBLISH) | '0',
 * sender (optional).
 * Returns how many keys were ours and are now deleted.
 */
export const RELEASE = luaScript(
  'release',
  `local released, queued, waited = {}, {}, false
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    released[#released + 1] = KEYS[i]
  end
end
if ARGV[2] == '0' then return #released end
for i = 1, #released do
  queued[i] = redis.pcall('EXISTS', released[i] .. ':q')
  if queued[i] ~= 0 then waited = true end
end
-- Nobody to tell (the usual release): done before the functions below are made.
if not waited then return #released end
${LINE_LUA}${TELL_LUA}local now
for i = 1, #released do
  local head
  if queued[i] == 1 then
    now = now or millis()
    if now then head = earliest(released[i] .. ':q', now, false) end
  end
  if queued[i] ~= 0 then tell(released[i], head or '', ARGV[2], ARGV[3] or '') end
end
return #released`,
);

/**
 * Re-seeding: raise a fence counter to a value found on another node, never
 * lower it.
 * KEYS: the fence counter. ARGV: value, counter ttl ms ('0': forever).
 * Returns 1 when raised, 0 when it already was at least that high.
 */
export const RAISE_FENCE = luaScript(
  'raise-fence',
  `if (tonumber(redis.call('GET', KEYS[1])) or 0) >= tonumber(ARGV[1]) then return 0 end
if ARGV[2] == '0' then
  redis.call('SET', KEYS[1], ARGV[1])
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 1`,
);

/** The scripts a {@link BATCH} call can run, by their index there (from 1). */
export const BATCHABLE: readonly LuaScript[] = [ACQUIRE, RELEASE, EXTEND, FENCE_WRITEBACK];

/**
 * Several calls of the scripts above in one command, run in the order given:
 * concurrent lock calls bound for the same node cost the node (and the
 * client) one command instead of one each. Every call sees its own KEYS and
 * ARGV and gets its own reply; an error in one call (a key of the wrong type,
 * say) is that call's reply and does not stop the others. All its keys are
 * declared, so this is for servers, not clusters (their keys span slots).
 * KEYS: every call's keys, in call order.
 * ARGV: one JSON array with, per call, [script index, key count, [arguments
 * as strings]]. One argument instead of one per call argument: a client
 * pays for each argument of a command (ioredis about 0.15 µs), and Redis
 * decodes the JSON in C (cjson) about as fast as it reads separate
 * arguments.
 * Returns the replies as one JSON array, one element per call: what the
 * script returned (numbers, arrays of them; null for nil) or, where a call
 * failed, {"err": message}. One string instead of nested replies: ioredis
 * spends about 0.5 µs on each element of a nested reply, JSON.parse a
 * fraction of that. Integers are written with %d, exact up to 2^63 (cjson
 * would round them to 14 digits, and fencing tokens have 16).
 */
export const BATCH = luaScript(
  'batch',
  `local scripts = {
${BATCHABLE.map((s) => `function(KEYS, ARGV)\n${s.body}\nend`).join(',\n')}
}
local function encode(value)
  local kind = type(value)
  if kind == 'number' then
    if value % 1 == 0 then return string.format('%d', value) end
    return string.format('%.17g', value)
  elseif kind == 'table' then
    if value.err then return cjson.encode({ err = tostring(value.err) }) end
    local items = {}
    for j = 1, #value do items[j] = encode(value[j]) end
    return '[' .. table.concat(items, ',') .. ']'
  elseif kind == 'string' then
    return cjson.encode(value)
  elseif value == true then
    return '1'
  end
  return 'null'
end
local calls, out, k = cjson.decode(ARGV[1]), {}, 0
for i = 1, #calls do
  local call, keys = calls[i], {}
  for j = 1, call[2] do keys[j] = KEYS[k + j] end
  k = k + call[2]
  local ok, reply = pcall(scripts[call[1]], keys, call[3])
  -- A Redis error arrives as {err = ...}; any other failure (a Lua error) as a message.
  if not ok and not (type(reply) == 'table' and reply.err) then reply = { err = tostring(reply) } end
  out[i] = encode(reply)
end
return '[' .. table.concat(out, ',') .. ']'`,
);

/** Every script the engine runs, loaded on each connection before it serves a call. */
export const ALL_SCRIPTS: readonly LuaScript[] = [
  ...BATCHABLE,
  RAISE_FENCE,
  BATCH,
  ...RW_SCRIPTS,
  ...SEMAPHORE_SCRIPTS,
];
