package webhook

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"os/exec"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// The interop scripts read {"verify": [...], "sign": [...]} and write
// {"verified": [bool...], "exported": [x...], "signed": {"jwk", "sigs"}}:
// they verify relay's signatures with the JWK relay makes (building the
// signed content themselves), and sign the "sign" messages with a key of
// their own, which they give back as a JWK.
const nodeInterop = `
const crypto = require("crypto");
const req = JSON.parse(require("fs").readFileSync(0, "utf8"));
const content = (m) => Buffer.concat([Buffer.from(m.id + "." + m.ts + ".", "utf8"), Buffer.from(m.body, "base64")]);
const out = {verified: [], exported: []};
for (const c of req.verify) {
  const key = crypto.createPublicKey({key: c.jwk, format: "jwk"});
  if (key.asymmetricKeyType !== "ed25519") throw new Error("not an Ed25519 key: " + key.asymmetricKeyType);
  out.exported.push(key.export({format: "jwk"}).x);
  if (!c.sig.startsWith("v1a,")) throw new Error("not a v1a signature: " + c.sig);
  out.verified.push(crypto.verify(null, content(c), key, Buffer.from(c.sig.slice(4), "base64")));
}
const {publicKey, privateKey} = crypto.generateKeyPairSync("ed25519");
out.signed = {jwk: publicKey.export({format: "jwk"}), sigs: req.sign.map((m) => crypto.sign(null, content(m), privateKey).toString("base64"))};
process.stdout.write(JSON.stringify(out));
`

const pythonInterop = `
import base64, json, sys
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

def unb64url(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))

def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()

def content(m):
    return f"{m['id']}.{m['ts']}.".encode() + base64.b64decode(m["body"])

req = json.load(sys.stdin)
out = {"verified": [], "exported": []}
for c in req["verify"]:
    assert c["jwk"]["kty"] == "OKP" and c["jwk"]["crv"] == "Ed25519", c["jwk"]
    key = Ed25519PublicKey.from_public_bytes(unb64url(c["jwk"]["x"]))
    out["exported"].append(b64url(key.public_bytes(Encoding.Raw, PublicFormat.Raw)))
    assert c["sig"].startswith("v1a,"), c["sig"]
    try:
        key.verify(base64.b64decode(c["sig"][4:]), content(c))
        out["verified"].append(True)
    except InvalidSignature:
        out["verified"].append(False)
priv = Ed25519PrivateKey.generate()
x = b64url(priv.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
out["signed"] = {"jwk": {"kty": "OKP", "crv": "Ed25519", "x": x}, "sigs": [base64.b64encode(priv.sign(content(m))).decode() for m in req["sign"]]}
json.dump(out, sys.stdout)
`

type interopMessage struct {
	ID   string `json:"id"`
	TS   int64  `json:"ts"`
	Body []byte `json:"body"` // base64 in JSON
}

type interopCase struct {
	interopMessage
	JWK  JWK    `json:"jwk"`
	Sig  string `json:"sig"`
	want bool
	name string
}

type interopOutput struct {
	Verified []bool   `json:"verified"`
	Exported []string `json:"exported"`
	Signed   struct {
		JWK  JWK      `json:"jwk"`
		Sigs []string `json:"sigs"`
	} `json:"signed"`
}

// relay's v1a signatures and JWKs, checked by independent Ed25519
// implementations (Node's crypto, which is OpenSSL's, and Python's
// cryptography), and theirs by relay's Verify: the Standard Webhooks
// vector and random keys, genuine and tampered, both ways.
func TestEd25519AgreesWithNodeAndPython(t *testing.T) {
	t.Parallel()
	vectorKey := SigningKeyPrefix + "VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="
	binary := make([]byte, 300)
	_, _ = rand.Read(binary)
	messages := []interopMessage{
		{"msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`)},
		{"evt_1", 1_900_000_000, []byte(`{"order":42,"note":"ünïcode ✓"}`)},
		{"evt_2", 1_900_000_001, []byte{}}, // empty: "" in JSON, not null
		{"evt.with.dots", 1_900_000_002, []byte("line one\nline two\n")},
		{"evt_4", 1_900_000_003, binary},
	}

	var cases []interopCase
	add := func(name, signingKey string, m interopMessage, verifyKey string) {
		sig, err := SignEd25519(signingKey, m.ID, m.TS, m.Body)
		require.NoError(t, err)
		jwk, err := JWKOf(verifyKey)
		require.NoError(t, err)
		tampered := m
		tampered.Body = append(bytes.Clone(m.Body), ' ')
		cases = append(cases,
			interopCase{m, jwk, sig, mustPublicKey(t, signingKey) == verifyKey, name},
			interopCase{tampered, jwk, sig, false, name + ", tampered body"})
	}
	vectorPK := mustPublicKey(t, vectorKey)
	add("vector", vectorKey, messages[0], vectorPK)
	for i, m := range messages[1:] {
		k := GenerateSigningKey()
		add("random key "+strconv.Itoa(i), k, m, mustPublicKey(t, k))
	}
	add("another key's signature", GenerateSigningKey(), messages[1], vectorPK)
	sig, err := SignEd25519(vectorKey, messages[0].ID, messages[0].TS, messages[0].Body)
	require.NoError(t, err)
	require.Equal(t, "v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag==", sig)
	input, err := json.Marshal(map[string]any{"verify": cases, "sign": messages})
	require.NoError(t, err)

	for _, impl := range []struct {
		name, bin string
		args      []string
		missing   func() string // why the implementation cannot run, "" when it can
	}{
		{"node", "node", []string{"-e", nodeInterop}, func() string { return "" }},
		{"python", "python3", []string{"-c", pythonInterop}, func() string {
			if out, err := exec.Command("python3", "-c", "import cryptography").CombinedOutput(); err != nil {
				return "Python's cryptography is not installed (pip install cryptography): " + string(out)
			}
			return ""
		}},
	} {
		t.Run(impl.name, func(t *testing.T) {
			t.Parallel()
			if _, err := exec.LookPath(impl.bin); err != nil {
				t.Skipf("%s is not installed", impl.bin)
			}
			if why := impl.missing(); why != "" {
				t.Skip(why)
			}
			cmd := exec.Command(impl.bin, impl.args...)
			cmd.Stdin = bytes.NewReader(input)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			stdout, err := cmd.Output()
			require.NoError(t, err, "%s", stderr.String())
			var out interopOutput
			require.NoError(t, json.Unmarshal(stdout, &out), "%s", stdout)

			// relay signs, they verify.
			require.Len(t, out.Verified, len(cases))
			for i, c := range cases {
				require.Equal(t, c.want, out.Verified[i], c.name)
				require.Equal(t, c.JWK.X, out.Exported[i], "%s: the key %s read from relay's JWK", c.name, impl.name)
			}

			// They sign, relay verifies with the key of their JWK.
			pk, err := PublicKeyOfJWK(out.Signed.JWK)
			require.NoError(t, err, "%+v", out.Signed.JWK)
			require.Len(t, out.Signed.Sigs, len(messages))
			for i, m := range messages {
				sig := "v1a," + out.Signed.Sigs[i]
				require.NoError(t, Verify(pk, m.ID, m.TS, m.Body, sig), m.ID)
				require.ErrorIs(t, Verify(pk, m.ID, m.TS, append(bytes.Clone(m.Body), ' '), sig), ErrNoMatchingSignature, m.ID)
				require.ErrorIs(t, Verify(vectorPK, m.ID, m.TS, m.Body, sig), ErrNoMatchingSignature, m.ID)
			}
		})
	}
}

func mustPublicKey(t *testing.T, signingKey string) string {
	t.Helper()
	pk, err := PublicKey(signingKey)
	require.NoError(t, err)
	return pk
}
