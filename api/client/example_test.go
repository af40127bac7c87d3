package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/relaydev/relay/api/client"
)

// Publish an event, then follow its delivery in the delivery log.
func Example() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:8088", "relay_0123456789abcdef_...")
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Publish(ctx, client.NewEvent{Dest: "orders", Key: "c42", Data: map[string]any{"id": 42}},
		client.IdempotencyKey("order-42-created"))
	var pe *client.Error
	switch {
	case errors.As(err, &pe):
		log.Fatalf("refused (%d, field %q): %s", pe.Status, pe.Field, pe.Detail)
	case err != nil:
		log.Fatal(err) // relay did not answer
	}
	for a, err := range c.AllAttempts(ctx, client.AttemptQuery{EventID: res.ID, Since: time.Now().Add(-time.Hour)}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(a.Dest, a.Attempt, a.Outcome, a.Status)
	}
}

func ExampleClient_CreateDestination() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:8088", "relay_0123456789abcdef_...")
	if err != nil {
		log.Fatal(err)
	}
	d, err := c.CreateDestination(ctx, client.NewDestination{Name: "orders", DestinationSettings: client.DestinationSettings{
		URL:         new("https://example.com/hooks"),
		Types:       []string{"order.*"},
		MaxAttempts: new(5),
		Timeout:     new(client.Duration(10 * time.Second)),
	}})
	if client.IsConflict(err) {
		log.Fatal("orders exists already")
	} else if err != nil {
		log.Fatal(err)
	}
	fmt.Println("sign with", d.Secret) // shown this once
}
