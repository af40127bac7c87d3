package destination

import (
	"errors"
	"strings"
	"testing"
)

func TestSealerOpensWithPreviousKeysAndSealsWithTheCurrent(t *testing.T) {
	oldKey, newKey := []byte("the-old-key-0123456789"), []byte("the-new-key-0123456789")
	old, err := newSealer(oldKey)
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := newSealer(newKey, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := newSealer(newKey)
	if err != nil {
		t.Fatal(err)
	}
	byOld := old.seal("whsec_x", "d")
	plain, current, err := rotated.openKey(byOld, "d")
	if err != nil || plain != "whsec_x" || current {
		t.Fatalf("sealed with the previous key: %q, current %v, %v; want it opened, not current", plain, current, err)
	}
	byNew := rotated.seal("whsec_x", "d")
	if !strings.HasPrefix(byNew, sealedPrefix) {
		t.Fatalf("not sealed: %q", byNew)
	}
	if _, err := old.open(byNew, "d"); !errors.Is(err, ErrSealed) {
		t.Fatalf("the old key opened what the rotated sealer sealed (%v): it must seal with the new key", err)
	}
	plain, current, err = fresh.openKey(byNew, "d")
	if err != nil || plain != "whsec_x" || !current {
		t.Fatalf("sealed with the current key: %q, current %v, %v", plain, current, err)
	}
	if _, err := fresh.open(byOld, "d"); !errors.Is(err, ErrSealed) {
		t.Fatalf("without the previous key: %v, want ErrSealed", err)
	}
	if _, current, err := rotated.openKey("whsec_clear", "d"); err != nil || current {
		t.Fatalf("a secret in the clear: current %v, %v; want not current", current, err)
	}
	if _, err := rotated.open(byOld, "other"); !errors.Is(err, ErrSealed) {
		t.Fatalf("opened under another destination's name: %v", err)
	}
	if _, err := newSealer(newKey, []byte("short")); err == nil || !strings.Contains(err.Error(), "previous secret key: 5 bytes is too short") {
		t.Fatalf("a short previous key: %v", err)
	}
}
