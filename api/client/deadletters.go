package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"
)

// DeadLetters returns a page of the dead letters q selects, oldest first,
// without their history, headers and body (listDeadLetters). Scope: read.
func (c *Client) DeadLetters(ctx context.Context, q DeadLetterQuery) (DeadLetterPage, error) {
	v := url.Values{}
	set(v, "dest", q.Dest)
	set(v, "reason", q.Reason)
	set(v, "status", q.Status)
	setTime(v, "since", q.Since)
	setTime(v, "until", q.Until)
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.After != 0 {
		v.Set("after", strconv.FormatUint(q.After, 10))
	}
	var out DeadLetterPage
	err := c.do(ctx, request{method: http.MethodGet, path: "/dead-letters", query: v}, &out)
	return out, err
}

// AllDeadLetters iterates over every dead letter q selects, oldest first,
// from q.After on, reading a page (of q.Limit) at a time. An error ends
// it, yielded with a zero letter.
func (c *Client) AllDeadLetters(ctx context.Context, q DeadLetterQuery) iter.Seq2[DeadLetter, error] {
	return func(yield func(DeadLetter, error) bool) {
		for {
			page, err := c.DeadLetters(ctx, q)
			if err != nil {
				yield(DeadLetter{}, err)
				return
			}
			for _, l := range page.DeadLetters {
				if !yield(l, nil) {
					return
				}
			}
			if page.NextAfter == 0 {
				return
			}
			q.After = page.NextAfter
		}
	}
}

// DeadLetter returns one dead letter with its history, its event's
// headers and body (getDeadLetter); IsNotFound when there is none. Scope:
// read.
func (c *Client) DeadLetter(ctx context.Context, seq uint64) (DeadLetterDetail, error) {
	var out DeadLetterDetail
	err := c.do(ctx, request{method: http.MethodGet, path: "/dead-letters/" + strconv.FormatUint(seq, 10)}, &out)
	return out, err
}

// DeadLetterBody returns a dead letter's body, the exact bytes its event
// was published with (getDeadLetterBody); IsNotFound when there is no such
// letter, or it holds no copy of a large event that the events stream no
// longer keeps. Scope: read.
func (c *Client) DeadLetterBody(ctx context.Context, seq uint64) ([]byte, error) {
	return c.bytes(ctx, request{method: http.MethodGet, path: "/dead-letters/" + strconv.FormatUint(seq, 10) + "/body"})
}

// ReplayDeadLetters republishes the dead letters sel selects, each with
// its event id, to its destination or sel.ToDest, and removes each once
// that is confirmed, as 'relay dlq replay' does (replayDeadLetters). One
// that fails does not stop the others: see the result's Failed. Scope:
// admin.
func (c *Client) ReplayDeadLetters(ctx context.Context, sel ReplaySelection) (ReplayResult, error) {
	var out ReplayResult
	err := c.do(ctx, request{method: http.MethodPost, path: "/dead-letters/replay", body: sel}, &out)
	return out, err
}

// PurgeDeadLetters deletes the dead letters sel selects for good, as
// 'relay dlq purge --yes' does (purgeDeadLetters). Scope: admin.
func (c *Client) PurgeDeadLetters(ctx context.Context, sel LetterSelection) (PurgeResult, error) {
	var out PurgeResult
	err := c.do(ctx, request{method: http.MethodPost, path: "/dead-letters/purge", body: sel}, &out)
	return out, err
}
