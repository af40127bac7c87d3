package main

import (
	"context"
	"fmt"
	"time"

	"github.com/relaydev/relay/destination"

	"github.com/urfave/cli/v2"
)

// The commands that change one setting of a destination now: pause,
// resume and rotate-secret.

// pauseOpts are the options of 'relay dest pause' and 'relay dest resume'.
type pauseOpts struct {
	cmdLine
	pause  bool
	forDur *time.Duration // pause --for

	name string // Validate
}

func readPause(c *cli.Context) *pauseOpts {
	return &pauseOpts{cmdLine: readCmdLine(c), pause: true, forDur: setOnly(c, "for", c.Duration)}
}

func readResume(c *cli.Context) *pauseOpts {
	return &pauseOpts{cmdLine: readCmdLine(c)}
}

func (o *pauseOpts) Validate() (err error) {
	if o.name, err = o.destArg(); err != nil {
		return err
	}
	if o.pause && o.forDur != nil && *o.forDur <= 0 {
		return usagef("--for must be positive")
	}
	return nil
}

func (o *pauseOpts) Run(ctx context.Context, e *env) error {
	name := o.name
	until := destination.Forever
	if o.pause && o.forDur != nil {
		until = time.Now().Add(*o.forDur).UTC()
	}
	ctx, cl, st, err := e.openDests(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	defer cl.close()
	if o.pause {
		_, err = st.Pause(ctx, name, until)
	} else {
		_, err = st.Resume(ctx, name)
	}
	if err != nil {
		return err
	}
	switch {
	case !o.pause:
		fmt.Fprintf(e.out, "resumed destination %s\n", name)
	case until.Equal(destination.Forever):
		fmt.Fprintf(e.out, "paused destination %s until 'relay dest resume %s'\n", name, name)
	default:
		fmt.Fprintf(e.out, "paused destination %s until %s\n", name, until.Format(time.RFC3339))
	}
	return nil
}

// rotateSecretOpts are the options of 'relay dest rotate-secret'.
type rotateSecretOpts struct {
	cmdLine
	overlap time.Duration
	secret  string // "": generate one

	name string // Validate
}

func readRotateSecret(c *cli.Context) *rotateSecretOpts {
	return &rotateSecretOpts{cmdLine: readCmdLine(c), overlap: c.Duration("overlap"), secret: c.String("secret")}
}

func (o *rotateSecretOpts) Validate() (err error) {
	if o.name, err = o.destArg(); err != nil {
		return err
	}
	if o.overlap < 0 {
		return usagef("--overlap must not be negative")
	}
	return nil
}

func (o *rotateSecretOpts) Run(ctx context.Context, e *env) error {
	name := o.name
	ctx, cl, st, err := e.openDests(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	defer cl.close()
	d, err := st.RotateSecret(ctx, name, o.secret, o.overlap)
	if err != nil {
		return err
	}
	if d.SignsHMAC() {
		if d.PrevSecret != "" {
			fmt.Fprintf(e.out, "rotated the secret of %s; the old one also signs until %s\n", name, d.PrevSecretUntil.Format(time.RFC3339))
		} else {
			fmt.Fprintf(e.out, "rotated the secret of %s; the old one no longer signs\n", name)
		}
		if o.secret == "" {
			fmt.Fprintf(e.out, "new signing secret (shown once): %s\n", d.Secret)
		}
	}
	if d.SignsEd25519() {
		if d.PrevSigningKey != "" {
			fmt.Fprintf(e.out, "rotated the Ed25519 signing key of %s; the old one also signs, and stays in the JWKS, until %s\n", name, d.PrevSigningKeyUntil.Format(time.RFC3339))
		} else {
			fmt.Fprintf(e.out, "rotated the Ed25519 signing key of %s; the old one no longer signs\n", name)
		}
		for _, pk := range d.PublicKeys(time.Now()) {
			if pk.Until.IsZero() {
				fmt.Fprintf(e.out, "new public key (kid %s): %s\n", pk.ID, pk.Key)
			}
		}
	}
	return nil
}
