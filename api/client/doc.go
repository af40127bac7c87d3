// Package client is a Go client of relay's HTTP API, the one 'relay run
// --api-addr' serves under /v1 and api/openapi.json describes: one method
// per operation of the document, with the document's types.
//
// A Client takes the API's address and a key from 'relay api-key
// create'; every method takes a context first:
//
//	c, err := client.New("http://127.0.0.1:8088", os.Getenv("RELAY_API_KEY"))
//	if err != nil {
//		return err
//	}
//	res, err := c.Publish(ctx, client.NewEvent{Dest: "orders", Key: "c42", Data: order},
//		client.IdempotencyKey("order-42-created"))
//	var pe *client.Error
//	if errors.As(err, &pe) && pe.Field != "" {
//		// pe.Status 422, pe.Field "dest": what was wrong is in pe.Detail
//	}
//
// An answer that is not a success is an *Error, the RFC 9457 problem the
// server answered (IsNotFound, IsConflict). AllAttempts and AllDeadLetters
// iterate over every page of a listing.
//
// The package depends on the standard library only. Its tests send every
// request through the real server and check each request and answer
// against the document, and that every operation of it has a test.
package client
