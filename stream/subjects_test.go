package stream

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

func TestValidateDestNameTable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ok   bool
	}{
		{"a", true},
		{"0", true},
		{"orders", true},
		{"order-v2_eu", true},
		{"9lives", true},
		{"a-", true},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"", false},
		{"-orders", false},
		{"_orders", false},
		{"Orders", false},
		{"orDers", false},
		{"a.b", false},
		{"a*", false},
		{"a>", false},
		{"a b", false},
		{"a\n", false},
		{"orders\n", false},
		{"a/b", false},
		{"a:b", false},
		{"café", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateDestName(tc.name)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), "invalid destination name")
		})
	}
}

var subjectsTestHashedRE = regexp.MustCompile(`^h-[0-9a-f]{32}$`)

// subjectsTestValidToken reports whether tok is one NATS subject token that
// relay accepts as a key token.
func subjectsTestValidToken(t *testing.T, tok string) {
	t.Helper()
	require.NotEmpty(t, tok)
	require.LessOrEqual(t, len(tok), 64)
	require.False(t, strings.ContainsAny(tok, ".*> \t\r\n"), "token %q", tok)
	require.True(t, keyTokenRE.MatchString(tok), "token %q", tok)
	require.Len(t, strings.Split(InSubject("d", "x")+"."+tok, "."), 5)
}

func TestKeyTokenTable(t *testing.T) {
	t.Parallel()
	hash := func(k string) string {
		s := sha256.Sum256([]byte(k))
		return "h-" + hex.EncodeToString(s[:])[:32]
	}
	tests := []struct {
		name string
		key  string
		keep bool
	}{
		{"plain", "user-42", true},
		{"all allowed characters", "Az09_:=-", true},
		{"single char", "k", true},
		{"64 chars", strings.Repeat("k", 64), true},
		{"looks hashed", "h-0123456789abcdef0123456789abcdef", true},
		{"65 chars", strings.Repeat("k", 65), false},
		{"empty", "", false},
		{"dot", "user.42", false},
		{"star", "user*", false},
		{"gt", ">", false},
		{"space", "user 42", false},
		{"tab", "a\tb", false},
		{"newline", "a\n", false},
		{"unicode", "ключ", false},
		{"emoji", "🔑", false},
		{"slash", "a/b", false},
		{"dollar", "$key", false},
		{"long with dots", strings.Repeat("a.", 100), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := KeyToken(tc.key)
			if tc.keep {
				require.Equal(t, tc.key, got)
			} else {
				require.Equal(t, hash(tc.key), got)
				require.Regexp(t, subjectsTestHashedRE, got)
				require.Len(t, got, 34)
			}
			require.Equal(t, got, KeyToken(tc.key), "KeyToken must be deterministic")
			require.Equal(t, got, KeyToken(got), "a token must map to itself")
			subjectsTestValidToken(t, got)
		})
	}
	require.NotEqual(t, KeyToken("a.b"), KeyToken("a*b"))
	require.NotEqual(t, KeyToken("a.b"), KeyToken("a.c"))
}

func TestKeyTokenRandomKeysAreValidTokens(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("aZ09_:=-.*> \t\n/$éж🔑\x00\x7f")
	for range 2000 {
		n := rnd.IntN(100)
		var b strings.Builder
		for range n {
			b.WriteRune(alphabet[rnd.IntN(len(alphabet))])
		}
		key := b.String()
		tok := KeyToken(key)
		subjectsTestValidToken(t, tok)
		require.Equal(t, tok, KeyToken(key))
		if tok != key {
			require.Regexp(t, subjectsTestHashedRE, tok, "key %q", key)
		}
	}
	require.True(t, utf8.ValidString(KeyToken("\xff\xfe")))
}

func TestInSubject(t *testing.T) {
	t.Parallel()
	require.Equal(t, "relay.in.orders", InSubject("orders", ""))
	require.Equal(t, "relay.in.orders.user-1", InSubject("orders", "user-1"))
	hashed := InSubject("orders", "tenant.7 user")
	require.Equal(t, "relay.in.orders."+KeyToken("tenant.7 user"), hashed)
	require.Len(t, strings.Split(hashed, "."), 4)
	require.Regexp(t, `^relay\.in\.orders\.h-[0-9a-f]{32}$`, hashed)

	require.Equal(t, "relay.dlq.orders", DLQSubject("orders"))
	require.Equal(t, []string{"relay.in.orders", "relay.ev.orders.>"}, DestFilters("orders"))
}

func TestParseSubjectTable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		subj    string
		want    Parsed
		wantErr string // empty: valid
	}{
		{"relay.in.orders", Parsed{Dest: "orders", Bucket: -1}, ""},
		{"relay.in.orders.user-1", Parsed{Dest: "orders", KeyToken: "user-1", Bucket: -1}, ""},
		{"relay.ev.orders.5", Parsed{Dest: "orders", Bucket: 5}, ""},
		{"relay.ev.orders.0", Parsed{Dest: "orders", Bucket: 0}, ""},
		{"relay.ev.orders.63", Parsed{Dest: "orders", Bucket: 63}, ""},
		{"", Parsed{}, "not a relay event subject"},
		{"relay", Parsed{}, "not a relay event subject"},
		{"relay.in", Parsed{}, "not a relay event subject"},
		{"nats.in.orders", Parsed{}, "not a relay event subject"},
		{"relay.out.orders", Parsed{}, "not a relay event subject"},
		{"relay.dlq.orders", Parsed{}, "not a relay event subject"},
		{"Relay.in.orders", Parsed{}, "not a relay event subject"},
		{"relay.in.orders.k.extra", Parsed{}, "not a relay event subject"},
		{"relay.ev.orders", Parsed{}, "not a relay event subject"},
		// The earlier layout, with the key token after the bucket.
		{"relay.ev.orders.5.user-1", Parsed{}, "not a relay event subject"},
		{"relay.ev.orders.5.k.extra", Parsed{}, "not a relay event subject"},
		{"relay.in.orders.5.k", Parsed{}, "not a relay event subject"},
		{"relay.ev.orders.x", Parsed{}, `bad bucket token "x"`},
		{"relay.ev.orders.", Parsed{}, "not a relay event subject"},
		{"relay.ev.orders.5x", Parsed{}, `bad bucket token "5x"`},
		{"relay.ev.orders.05", Parsed{}, `bad bucket token "05"`},
		{"relay.ev.orders.+7", Parsed{}, `bad bucket token "+7"`},
		{"relay.ev.orders.64", Parsed{}, `bad bucket token "64"`},
		{"relay.ev.orders.-1", Parsed{}, `bad bucket token "-1"`},
		{"relay.ev.orders.*", Parsed{}, "not a relay event subject"},
		{"relay.in.", Parsed{}, "not a relay event subject"},
		{"relay.in.*", Parsed{}, "not a relay event subject"},
	}
	for _, tc := range tests {
		t.Run(tc.subj, func(t *testing.T) {
			t.Parallel()
			got, err := ParseSubject(tc.subj)
			if tc.wantErr != "" {
				require.Error(t, err)
				require.Contains(t, err.Error(), tc.wantErr)
				require.Equal(t, Parsed{}, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestParsedInputSubjectRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		subj, key, input string
	}{
		{"relay.in.orders", "", "relay.in.orders"},
		{"relay.in.orders", "k", "relay.in.orders"}, // stored without a key: stays so
		{"relay.in.orders.user-1", "", "relay.in.orders.user-1"},
		{"relay.in.orders.user-1", "user-1", "relay.in.orders.user-1"},
		// A stored keyed event goes back under its key's token...
		{KeyedSubject("orders", "user-1"), "user-1", "relay.in.orders.user-1"},
		{KeyedSubject("orders", "tenant.7 user"), "tenant.7 user", "relay.in.orders." + KeyToken("tenant.7 user")},
	}
	for _, tc := range tests {
		t.Run(tc.subj+"/"+tc.key, func(t *testing.T) {
			t.Parallel()
			p, err := ParseSubject(tc.subj)
			require.NoError(t, err)
			require.Equal(t, tc.input, p.InputSubject(tc.key))
		})
	}
	for _, key := range []string{"", "user-1", "tenant.7 user", "ключ", strings.Repeat("x", 80)} {
		in := InSubject("orders", key)
		p, err := ParseSubject(in)
		require.NoError(t, err)
		require.Equal(t, "orders", p.Dest)
		require.Equal(t, in, p.InputSubject(key), "key %q", key)
		if key != "" {
			require.Equal(t, KeyToken(key), p.KeyToken)
		}
	}
}

// A stored keyed event whose key relay does not know (a plain NATS client
// published it without Relay-Order-Key, or with a token of its own) goes
// back into its own bucket, so its order holds.
func TestInputSubjectKeepsTheBucket(t *testing.T) {
	t.Parallel()
	for b := range Buckets {
		p, err := ParseSubject(fmt.Sprintf("relay.ev.orders.%d", b))
		require.NoError(t, err)
		for _, key := range []string{"", "customer-42", "tenant.7 user"} {
			in := p.InputSubject(key)
			q, err := ParseSubject(in)
			require.NoError(t, err, in)
			require.Equal(t, "orders", q.Dest)
			require.NotEmpty(t, q.KeyToken, "%s: a keyed event stays keyed", in)
			require.Equal(t, b, Bucket(q.KeyToken), "%s for key %q", in, key)
			if key != "" && Bucket(KeyToken(key)) == b {
				require.Equal(t, KeyToken(key), q.KeyToken, "the key's own token when it fits")
			}
		}
	}
}

func TestKeyedSubject(t *testing.T) {
	t.Parallel()
	// FNV-1a of "k" is 0xee0c38ea; mod 64 that is 42.
	require.Equal(t, 42, Bucket("k"))
	require.Equal(t, "relay.ev.orders.42", KeyedSubject("orders", "k"))
	require.Equal(t, KeyedSubject("orders", "tenant.7 user"), fmt.Sprintf("relay.ev.orders.%d", Bucket(KeyToken("tenant.7 user"))))
}

func TestIsContractHeader(t *testing.T) {
	t.Parallel()
	for _, h := range []string{HdrMsgID, HdrEventID, HdrAttempt, HdrKey, HdrFirst, HdrReason, HdrDest,
		HdrLastStatus, HdrLastError, HdrAttempts, HdrLastAt, HdrOrigSubj, HdrOrigSeq, HdrHistory, HdrDeadAt,
		"nats-expected-stream", "RELAY-anything", "Nats-"} {
		require.True(t, IsContractHeader(h), h)
	}
	for _, h := range []string{"Content-Type", "X-Relay-Id", "Natsy", "Relay", "Authorization", ""} {
		require.False(t, IsContractHeader(h), h)
	}
}

func TestAckMetadataReadsBothLayouts(t *testing.T) {
	ts := time.Date(2026, 12, 1, 5, 0, 0, 123, time.UTC)
	ns := "1796101200000000123"
	require.Equal(t, ts.UnixNano(), int64(1796101200000000123))
	want := &jetstream.MsgMetadata{
		Sequence:     jetstream.SequencePair{Stream: 42, Consumer: 17},
		NumDelivered: 3, NumPending: 5, Timestamp: time.Unix(0, ts.UnixNano()),
		Stream: "RELAY_EVENTS", Consumer: "relay_x",
	}
	got, err := AckMetadata("$JS.ACK.RELAY_EVENTS.relay_x.3.42.17." + ns + ".5")
	require.NoError(t, err)
	require.Equal(t, want, got)

	got, err = AckMetadata("$JS.ACK._.ACCHASH.RELAY_EVENTS.relay_x.3.42.17." + ns + ".5.tok")
	require.NoError(t, err)
	require.Equal(t, want, got, "v2 without a domain")

	withDomain := *want
	withDomain.Domain = "hub"
	got, err = AckMetadata("$JS.ACK.hub.ACCHASH.RELAY_EVENTS.relay_x.3.42.17." + ns + ".5")
	require.NoError(t, err)
	require.Equal(t, &withDomain, got, "v2 with a domain, without the random token")

	for _, bad := range []string{
		"", "_INBOX.x", "$JS.ACK.RELAY_EVENTS.relay_x.3.42.17." + ns,
		"$JS.ACK.RELAY_EVENTS.relay_x.3.-42.17." + ns + ".5",
		"$JS.ACK.RELAY_EVENTS.relay_x.3.42.17.99999999999999999999.5",
		"$JS.ACK.a.b.c.d.e.f.g.h.i.j.k.l",
	} {
		_, err := AckMetadata(bad)
		require.ErrorIs(t, err, jetstream.ErrNotJSMessage, "%q", bad)
	}
}

func TestAckMetadataAgreesWithNatsGo(t *testing.T) {
	for _, reply := range []string{
		"$JS.ACK.RELAY_EVENTS.relay_a.1.42.40.1764500000123456789.7",
		"$JS.ACK._.ACCHASH.RELAY_EVENTS.relay_a.2.42.40.1764500000123456789.7",
		"$JS.ACK.hub.ACCHASH.RELAY_EVENTS.relay_a_P3.1.9.9.1764500000000000000.0.tok",
		"$JS.ACK.D.H.S.C.1.42.40.1764500000123456789.7.tok.extra",
	} {
		want, err := (&nats.Msg{Subject: "relay.in.a", Reply: reply, Sub: &nats.Subscription{}}).Metadata()
		require.NoError(t, err, reply)
		got, err := AckMetadata(reply)
		require.NoError(t, err, reply)
		require.Equal(t, want.Sequence.Stream, got.Sequence.Stream, reply)
		require.Equal(t, want.Sequence.Consumer, got.Sequence.Consumer, reply)
		require.Equal(t, want.NumDelivered, got.NumDelivered, reply)
		require.Equal(t, want.NumPending, got.NumPending, reply)
		require.True(t, want.Timestamp.Equal(got.Timestamp), reply)
		require.Equal(t, want.Stream, got.Stream, reply)
		require.Equal(t, want.Consumer, got.Consumer, reply)
		require.Equal(t, want.Domain, got.Domain, reply)
	}
}
