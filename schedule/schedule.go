// Package schedule keeps events that must wait long before their next attempt
// out of JetStream: in a Redis sorted set per destination, scored by due time,
// until a promoter republishes them when due.
//
// A delayed nak holds one of its consumer's ack-pending slots for the whole
// wait, so thousands of events waiting for minutes would stall a destination.
// Parked events hold nothing in JetStream.
//
// Keys (all carry the {relay} hash tag, so Redis Cluster keeps them on one slot):
//
//	relay:{relay}:dests         set of destinations with parked events
//	relay:{relay}:due:<dest>    sorted set: member -> due time (Unix ms)
//	relay:{relay}:msg:<dest>    hash: member -> the parked event (JSON)
//
// A member is "<event id>#<attempt>@<origin>". Claiming re-scores members
// to a lease time instead of removing them, so a promoter that dies between claim and
// publish only delays them until the lease ends.
package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/relaydev/relay/stream"
)

// Entry is a parked event.
type Entry struct {
	// Dest is the destination. Required.
	Dest string `json:"dest"`
	// Subject is the input subject to republish to (relay.in.<dest>[.<key>]).
	Subject string `json:"subject"`
	// EventID is the event id (webhook-id). Required.
	EventID string `json:"id"`
	// Attempts is the number of attempts already made.
	Attempts int `json:"attempts"`
	// Headers are the event's own headers.
	Headers nats.Header `json:"headers,omitempty"`
	// Body is the event body.
	Body []byte `json:"body"`
	// Due is when the next attempt is due.
	Due time.Time `json:"due"`
	// Published is when the producer published the event.
	Published time.Time `json:"published,omitzero"`
	// Origin is the stream sequence of the message the event first came in
	// as (before any park): an operator's skip mark follows it. Required.
	Origin uint64 `json:"origin"`
}

// Member is the entry's member name in the sorted set. Parking the same
// event again at the same attempt replaces its entry; two stream messages
// with the same event id (a producer that published it again after the
// duplicate window, a replay) have different origins, and are kept apart.
func (e Entry) Member() string { return e.EventID + "#" + attemptFrom(e.Attempts, e.Origin) }

// MsgID is the dedup id the promoter republishes e with: a crash between the
// publish and the removal republishes within the duplicate window, and
// JetStream drops the copy. Like Member, it tells origins apart, so that
// JetStream does not drop another message's republish as a duplicate.
func (e Entry) MsgID() string { return e.Envelope().MsgID(stream.Promoted) }

// Envelope is the event e holds, as the promoter republishes it: its own
// headers, its type and order key (the other headers of relay in Headers
// are not carried), the attempts made, its origin and publish time.
func (e Entry) Envelope() stream.Envelope {
	h := stream.FromHeader(e.Headers)
	return stream.Envelope{
		ID: e.EventID, Dest: e.Dest, Attempt: e.Attempts, Origin: e.Origin,
		Type: h.Type, Key: h.Key,
		Published: e.Published, Headers: e.Headers, Body: e.Body,
	}
}

// attemptFrom ends a member, as it ends a stream.Promoted dedup id: the
// attempt, "@" and the origin.
func attemptFrom(attempts int, origin uint64) string {
	return strconv.Itoa(attempts) + "@" + strconv.FormatUint(origin, 10)
}

const prefix = "relay:{relay}:"

func destsKey() string           { return prefix + "dests" }
func dueKey(dest string) string  { return prefix + "due:" + dest }
func msgKey(dest string) string  { return prefix + "msg:" + dest }
func ms(t time.Time) int64       { return t.UnixMilli() }
func fromMS(v float64) time.Time { return time.UnixMilli(int64(v)).UTC() }

// Store is the Redis side: park, claim, remove, inspect.
type Store struct {
	rdb redis.UniversalClient
	// replicas is how many replicas must confirm a park (WAIT), within
	// replicaWait.
	replicas    int
	replicaWait time.Duration
	// degraded is set by a park that was not confirmed, and cleared by one
	// that was: meanwhile each park first asks the primary how many
	// replicas it has, and fails at once when too few.
	degraded *atomic.Bool
}

// NewStore uses rdb (a client, a cluster client or a failover client).
func NewStore(rdb redis.UniversalClient) *Store { return &Store{rdb: rdb} }

// Client returns the Redis client.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// ErrNotReplicated: fewer replicas than asked confirmed a park in time
// (Park then took the entry out of the primary again), or the primary has
// fewer replicas connected than asked (Park then wrote nothing). The event
// must wait elsewhere.
var ErrNotReplicated = errors.New("schedule: not confirmed by enough Redis replicas")

// WithReplicas returns a Store whose Park returns only once n replicas
// confirmed the write (Redis's WAIT), waiting at most wait; with fewer it
// returns ErrNotReplicated. Redis replicates asynchronously: without it, a
// failover can promote a replica that never got an entry the primary
// confirmed, and the parked event is lost. n = 0 waits for none. A wait
// under 1ms counts as 1ms (WAIT with 0 would block for ever); it must be
// shorter than the client's read timeout.
func (s *Store) WithReplicas(n int, wait time.Duration) (*Store, error) {
	c := *s
	c.replicas, c.replicaWait, c.degraded = n, max(wait, time.Millisecond), new(atomic.Bool)
	if n == 0 {
		return &c, nil
	}
	var read time.Duration
	switch r := s.rdb.(type) {
	case *redis.Client:
		read = r.Options().ReadTimeout
	case *redis.ClusterClient:
		read = r.Options().ReadTimeout
	}
	if read == 0 {
		read = 3 * time.Second // go-redis's default; below 0: none
	}
	if read > 0 && read <= c.replicaWait {
		return nil, fmt.Errorf("the Redis read timeout %s must be longer than the wait for replicas %s: a pipeline's reply is read within the read timeout", read, c.replicaWait)
	}
	return &c, nil
}

// Dial connects to Redis. url is redis://[user:password@]host:port[/db] or
// rediss:// for TLS; mode is "" (single server), "cluster" or "sentinel" (then
// url is read by go-redis's ParseClusterURL or ParseFailoverURL). It pings
// the server once.
func Dial(ctx context.Context, url, mode string) (*Store, error) {
	var rdb redis.UniversalClient
	switch mode {
	case "", "single":
		o, err := redis.ParseURL(url)
		if err != nil {
			return nil, fmt.Errorf("redis URL: %w", err)
		}
		rdb = redis.NewClient(o)
	case "cluster":
		o, err := redis.ParseClusterURL(url)
		if err != nil {
			return nil, fmt.Errorf("redis cluster URL: %w", err)
		}
		rdb = redis.NewClusterClient(o)
	case "sentinel":
		o, err := redis.ParseFailoverURL(url)
		if err != nil {
			return nil, fmt.Errorf("redis sentinel URL: %w", err)
		}
		if err := askSentinels(ctx, o); err != nil {
			return nil, fmt.Errorf("redis at %s: %w", redactURL(url), err)
		}
		rdb = redis.NewFailoverClient(o)
	default:
		return nil, fmt.Errorf("redis mode %q: use single, cluster or sentinel", mode)
	}
	// go-redis retries a failed dial within its retries of a command, and
	// in sentinel mode once more per Sentinel: unbounded, a Sentinel that
	// refuses connections takes about 36s to fail.
	pctx, cancel := context.WithTimeout(ctx, dialWait)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		if pctx.Err() != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("redis at %s: no answer to PING within %s: %w", redactURL(url), dialWait, err)
		}
		return nil, fmt.Errorf("redis at %s: %w", redactURL(url), err)
	}
	return NewStore(rdb), nil
}

// dialWait bounds Dial's first PING.
const dialWait = 10 * time.Second

// askSentinels asks each Sentinel of o, once, for the address of o's
// primary, until one gives it. Through the failover client, Sentinels that
// refuse connections take about 36s to fail (retries within retries), with
// an error that names neither them nor what they said; this says, for
// each, why it did not give one.
func askSentinels(ctx context.Context, o *redis.FailoverOptions) error {
	var errs []string
	for _, addr := range o.SentinelAddrs {
		sc := redis.NewSentinelClient(&redis.Options{
			Addr: addr, Username: o.SentinelUsername, Password: o.SentinelPassword,
			TLSConfig: o.TLSConfig, Dialer: o.Dialer, DialTimeout: o.DialTimeout, MaxRetries: -1,
		})
		_, err := sc.GetMasterAddrByName(ctx, o.MasterName).Result()
		sc.Close()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, redis.Nil):
			errs = append(errs, fmt.Sprintf("Sentinel %s knows no primary named %q", addr, o.MasterName))
		default:
			errs = append(errs, fmt.Sprintf("Sentinel %s: %v", addr, err))
		}
	}
	return fmt.Errorf("no Sentinel gave the address of primary %q: %s", o.MasterName, strings.Join(errs, "; "))
}

// redactURL is raw for an error message: its password, and any query
// parameter with "password" in its name, replaced by xxxxx.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	q, hidden := u.Query(), false
	for k := range q {
		if strings.Contains(strings.ToLower(k), "password") {
			q.Set(k, "xxxxx")
			hidden = true
		}
	}
	if hidden {
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// parkScript stores one entry.
//
// KEYS[1] due sorted set of the destination, KEYS[2] its message hash,
// KEYS[3] the set of destinations.
// ARGV[1] member, ARGV[2] due time (Unix ms), ARGV[3] entry JSON,
// ARGV[4] destination.
var parkScript = redis.NewScript(`
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[4])
return 1
`)

// claimScript leases up to ARGV[2] members due at or before ARGV[1] by
// re-scoring them to ARGV[3], and returns member, entry pairs. A member
// without an entry (not possible through this package) is dropped.
//
// KEYS[1] due sorted set, KEYS[2] message hash.
// ARGV[1] now (Unix ms), ARGV[2] batch size, ARGV[3] lease end (Unix ms).
var claimScript = redis.NewScript(`
local ms = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, m in ipairs(ms) do
  local p = redis.call('HGET', KEYS[2], m)
  if p then
    redis.call('ZADD', KEYS[1], 'XX', ARGV[3], m)
    out[#out + 1] = m
    out[#out + 1] = p
  else
    redis.call('ZREM', KEYS[1], m)
  end
end
return out
`)

// removeScript removes members after their republish was confirmed, and the
// destination from the set once it has nothing parked.
//
// KEYS[1] due sorted set, KEYS[2] message hash, KEYS[3] set of destinations.
// ARGV[1] destination, ARGV[2..] members.
var removeScript = redis.NewScript(`
for i = 2, #ARGV do
  redis.call('ZREM', KEYS[1], ARGV[i])
  redis.call('HDEL', KEYS[2], ARGV[i])
end
if redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[3], ARGV[1])
end
return #ARGV - 1
`)

// Park stores e until e.Due. It returns once Redis confirmed the write.
func (s *Store) Park(ctx context.Context, e Entry) error {
	if e.Dest == "" || e.EventID == "" || e.Subject == "" {
		return errors.New("schedule: an entry needs a destination, a subject and an event id")
	}
	if e.Origin == 0 {
		return fmt.Errorf("schedule: entry of event %s for destination %s has no origin (the stream sequence the event first came in as): it cannot be told apart from another message with the same event id", e.EventID, e.Dest)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	keys := []string{dueKey(e.Dest), msgKey(e.Dest), destsKey()}
	if s.replicas == 0 {
		err = parkScript.Run(ctx, s.rdb, keys, e.Member(), ms(e.Due), b, e.Dest).Err()
		if err == nil || nothingWritten(err) {
			return err // stored, or refused: nothing was written
		}
		return fmt.Errorf("%w (taking the entry out again: %v)", err, s.takeOut(ctx, e))
	}
	if s.degraded.Load() {
		// The last park was not confirmed: do not wait for replicas the
		// primary does not have.
		if n, err := s.ConnectedReplicas(ctx); err == nil && n < s.replicas {
			return fmt.Errorf("%w: the primary has %d of %d replicas connected", ErrNotReplicated, n, s.replicas)
		}
	}
	// WAIT counts the replicas that have what this connection wrote, so
	// the write and the WAIT go down one connection to the primary.
	c, err := s.primary(ctx)
	if err != nil {
		return err
	}
	pipe := c.Pipeline()
	park := parkScript.Eval(ctx, pipe, keys, e.Member(), ms(e.Due), b, e.Dest)
	wait := pipe.Do(ctx, "wait", s.replicas, s.replicaWait.Milliseconds())
	_, _ = pipe.Exec(ctx)
	if err := park.Err(); err != nil {
		s.reloadCluster(ctx)
		if nothingWritten(err) {
			return err // refused (a MOVED, say): nothing was written
		}
		// The reply was lost: the entry may be stored.
		return fmt.Errorf("%w (taking the entry out again: %v)", err, s.takeOut(ctx, e))
	}
	got, err := wait.Int64()
	if err == nil && got >= int64(s.replicas) {
		s.degraded.Store(false)
		return nil
	}
	// Not safe from a failover: take it out, so that the promoter does not
	// also deliver what will now wait in JetStream. Should that fail too,
	// the event may be delivered twice; it is not lost.
	s.degraded.Store(true)
	rerr := s.takeOut(ctx, e)
	if err != nil {
		return fmt.Errorf("%w: WAIT: %w (taking the entry out again: %v)", ErrNotReplicated, err, rerr)
	}
	return fmt.Errorf("%w: %d of %d confirmed within %s (taking the entry out again: %v)", ErrNotReplicated, got, s.replicas, s.replicaWait, rerr)
}

// nothingWritten reports whether err says that nothing was written: Redis's
// answer (the command was refused), or no connection to send it on. It is
// false for a reply lost on the way.
func nothingWritten(err error) bool {
	var re redis.Error
	var op *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return false
	case errors.As(err, &op) && op.Op == "dial", errors.Is(err, redis.ErrPoolTimeout):
		return true
	}
	return errors.As(err, &re)
}

// takeOut removes e after a park that may have stored it but must not
// count, with a time of its own: the park's context may be used up.
func (s *Store) takeOut(ctx context.Context, e Entry) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	return s.Remove(rctx, e.Dest, []string{e.Member()})
}

// reloadCluster has a cluster client read the slot map again after a
// failed park: the shard's primary may have moved.
func (s *Store) reloadCluster(ctx context.Context) {
	if c, ok := s.rdb.(*redis.ClusterClient); ok {
		c.ReloadState(ctx)
	}
}

// primary is a client of the Redis primary that holds the keys: the client
// itself, or the cluster's shard for the {relay} hash tag.
func (s *Store) primary(ctx context.Context) (*redis.Client, error) {
	switch c := s.rdb.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, destsKey())
	default:
		return nil, fmt.Errorf("schedule: waiting for replicas needs a single, failover or cluster client, not %T", s.rdb)
	}
}

// ConnectedReplicas is how many replicas the primary that holds the keys
// has connected now.
func (s *Store) ConnectedReplicas(ctx context.Context) (int, error) {
	c, err := s.primary(ctx)
	if err != nil {
		return 0, err
	}
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("schedule: INFO replication has no connected_slaves: %q", info)
}

// Claimed is an entry leased to one promoter.
type Claimed struct {
	Member string
	Entry  Entry
	// Err, when set, says why the entry must not be republished: it does
	// not decode, or it is not an event of the destination it is parked
	// for (relay's own input subjects only). Raw is the entry as stored.
	Err error
	Raw string
}

// check reports what makes e, parked for dest, unfit to republish.
func (e Entry) check(dest string) error {
	switch {
	case e.Dest != dest:
		return fmt.Errorf("it names destination %q", e.Dest)
	case !stream.IsInputSubject(e.Subject, dest):
		return fmt.Errorf("its subject %q is not an input subject of %s (relay.in.%s[.<key>])", e.Subject, dest, dest)
	case e.EventID == "" || strings.ContainsFunc(e.EventID, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return fmt.Errorf("its event id %q is empty or not printable", e.EventID)
	case e.Origin == 0:
		return fmt.Errorf("it has no origin (the stream sequence event %s first came in as)", e.EventID)
	}
	return nil
}

// Claim leases up to limit entries of dest that are due at now, until
// now+lease.
func (s *Store) Claim(ctx context.Context, dest string, now time.Time, limit int, lease time.Duration) ([]Claimed, error) {
	res, err := claimScript.Run(ctx, s.rdb, []string{dueKey(dest), msgKey(dest)},
		ms(now), limit, ms(now.Add(lease))).StringSlice()
	if err != nil {
		return nil, err
	}
	out := make([]Claimed, 0, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		var e Entry
		c := Claimed{Member: res[i], Raw: res[i+1]}
		if err := json.Unmarshal([]byte(res[i+1]), &e); err != nil {
			c.Err = fmt.Errorf("schedule: parked entry %s of %s is corrupt: %w", res[i], dest, err)
		} else if err := e.check(dest); err != nil {
			c.Err = fmt.Errorf("schedule: parked entry %s of %s refused: %w", res[i], dest, err)
		}
		c.Entry = e
		out = append(out, c)
	}
	return out, nil
}

// Hasten makes the entry of event eventID from origin (the stream sequence
// it first came in as; required) parked for dest due at at, if it is due
// later, and returns how many such entries are parked. The promoter then
// republishes it at once (one it has claimed meanwhile may be republished
// twice; JetStream drops the copy by its dedup id).
func (s *Store) Hasten(ctx context.Context, dest, eventID string, origin uint64, at time.Time) (int, error) {
	if origin == 0 {
		return 0, fmt.Errorf("schedule: hasten event %s of %s: no origin given (the stream sequence the event first came in as names its entry)", eventID, dest)
	}
	args := []any{ms(at)}
	iter := s.rdb.HScan(ctx, msgKey(dest), 0, globEscape(eventID)+"#*", 1000).Iterator()
	for i := 0; iter.Next(ctx); i++ {
		if i%2 == 0 && isMemberOf(iter.Val(), eventID, origin) { // fields and values alternate
			args = append(args, iter.Val())
		}
	}
	if err := iter.Err(); err != nil {
		return 0, err
	}
	if len(args) == 1 {
		return 0, nil
	}
	return hastenScript.Run(ctx, s.rdb, []string{dueKey(dest)}, args...).Int()
}

// hastenScript lowers the scores of members still in the sorted set to
// ARGV[1] where they are higher, and returns how many are in it.
//
// KEYS[1] due sorted set; ARGV[1] due time (Unix ms), ARGV[2..] members.
var hastenScript = redis.NewScript(`
local n = 0
for i = 2, #ARGV do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score then
    n = n + 1
    if tonumber(score) > tonumber(ARGV[1]) then
      redis.call('ZADD', KEYS[1], 'XX', ARGV[1], ARGV[i])
    end
  end
end
return n
`)

// isMemberOf reports whether member is the entry of eventID from origin:
// eventID, "#", the attempt, "@" and the origin.
func isMemberOf(member, eventID string, origin uint64) bool {
	rest, ok := strings.CutPrefix(member, eventID+"#")
	if !ok {
		return false
	}
	attempt, _, _ := strings.Cut(rest, "@")
	n, err := strconv.Atoi(attempt)
	return err == nil && rest == attemptFrom(n, origin)
}

// globEscape quotes the characters Redis's MATCH patterns give a meaning.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Remove deletes members of dest.
func (s *Store) Remove(ctx context.Context, dest string, members []string) error {
	if len(members) == 0 {
		return nil
	}
	args := make([]any, 0, len(members)+1)
	args = append(args, dest)
	for _, m := range members {
		args = append(args, m)
	}
	return removeScript.Run(ctx, s.rdb, []string{dueKey(dest), msgKey(dest), destsKey()}, args...).Err()
}

// Has reports whether e (its member: event id, attempt and origin) is
// parked for e.Dest: waiting, or claimed by a promoter and not yet removed.
// Once a promoter republished and removed it, it is not.
func (s *Store) Has(ctx context.Context, e Entry) (bool, error) {
	err := s.rdb.ZScore(ctx, dueKey(e.Dest), e.Member()).Err()
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, redis.Nil):
		return false, nil
	}
	return false, err
}

// Dests lists the destinations with parked entries.
func (s *Store) Dests(ctx context.Context) ([]string, error) {
	return s.rdb.SMembers(ctx, destsKey()).Result()
}

// DestStats describes what one destination has parked.
type DestStats struct {
	Parked    int64     `json:"parked"`
	OldestDue time.Time `json:"oldest_due,omitzero"`
}

// Stats returns the parked count and the oldest due time of dest.
func (s *Store) Stats(ctx context.Context, dest string) (DestStats, error) {
	n, err := s.rdb.ZCard(ctx, dueKey(dest)).Result()
	if err != nil {
		return DestStats{}, err
	}
	st := DestStats{Parked: n}
	if n > 0 {
		z, err := s.rdb.ZRangeWithScores(ctx, dueKey(dest), 0, 0).Result()
		if err != nil {
			return DestStats{}, err
		}
		if len(z) == 1 {
			st.OldestDue = fromMS(z[0].Score)
		}
	}
	return st, nil
}
