package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/internal/replica"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/routing"
	"github.com/relaydev/relay/schedule"
)

func statsCommand() *cli.Command {
	return &cli.Command{
		Name:  "stats",
		Usage: "show each destination's backlog, in-flight, parked and dead-letter counts",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dest", Usage: "only this destination"},
			tenantFlag(),
			redisURLFlag("also count events parked in this Redis"),
			redisModeFlag(),
			&cli.BoolFlag{Name: "json", Usage: "one JSON object per destination and line"},
			&cli.DurationFlag{Name: "watch", Usage: "print again every this long (e.g. 2s) until interrupted"},
		},
		Action: action(readStats),
	}
}

// statsOpts are the options of 'relay stats'.
type statsOpts struct {
	cmdLine
	dest  string
	redis redisOpts
	json  bool
	watch time.Duration
}

func readStats(c *cli.Context) *statsOpts {
	return &statsOpts{dest: c.String("dest"), redis: readRedis(c), json: c.Bool("json"), watch: c.Duration("watch"), cmdLine: readCmdLine(c)}
}

func (o *statsOpts) Validate() error {
	if len(o.args) > 0 {
		return usagef("unexpected argument %q: give a destination with --dest", o.args[0])
	}
	if every := o.watch; every < 0 || (every > 0 && every < 100*time.Millisecond) {
		return usagef("--watch %s: give an interval of at least 100ms", every)
	}
	return o.redis.Validate()
}

func (o *statsOpts) Run(ctx context.Context, e *env) error {
	limit := 30 * time.Second
	if o.watch > 0 {
		limit = 100 * 365 * 24 * time.Hour // until interrupted
	}
	ctx, cl, err := e.dial(ctx, limit)
	if err != nil {
		return err
	}
	defer cl.close()
	sched, closeSched, err := o.redis.open(ctx, e)
	if err != nil {
		return err
	}
	defer closeSched()
	for {
		if o.watch > 0 && !o.json && isTerminal(e.out) {
			fmt.Fprint(e.out, "\033[H\033[2J") // clear the screen
		}
		if err := o.print(ctx, e.out, cl.js, sched); err != nil {
			return err
		}
		if o.watch == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil // interrupted
		case <-time.After(o.watch):
		}
	}
}

// print prints one round of 'relay stats'.
func (o *statsOpts) print(ctx context.Context, w io.Writer, js jetstream.JetStream, sched *schedule.Store) error {
	all, err := relay.Stats(ctx, js, sched)
	if err != nil {
		return err
	}
	if o.tenant != "" {
		var its []relay.DestStats
		for _, s := range all {
			if s.Tenant == o.tenant {
				its = append(its, s)
			}
		}
		all = its
	}
	if o.dest != "" {
		d, err := o.destRef("--dest", o.dest)
		if err != nil {
			return err
		}
		var one []relay.DestStats
		for _, s := range all {
			if s.Dest == d {
				one = append(one, s)
			}
		}
		if len(one) == 0 {
			return fmt.Errorf("%w: %s", destination.ErrNotFound, destination.Display(d))
		}
		all = one
	}
	// The router's figures, once typed events were routed.
	rs, routed, err := routing.ReadState(ctx, js)
	if err != nil {
		return err
	}
	var lag uint64
	if routed {
		if lag, err = routing.Lag(ctx, js); err != nil {
			return err
		}
	}
	if o.json {
		if err := jsonLines(w, all, statsJSON); err != nil {
			return err
		}
		if routed && o.dest == "" {
			return json.NewEncoder(w).Encode(map[string]any{"typed_events": typedJSON{Events: rs.Events, Copies: rs.Copies, Unsubscribed: rs.Unsubscribed, Lag: lag}})
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DEST\tSTATE\tBACKLOG\tIN FLIGHT\tRETRYING\tPARKED\tOLDEST DUE\tDEAD LETTERS\tOLDEST UNDELIVERED\tBLOCKED PARTITIONS")
	for _, s := range all {
		parked, due := "-", "-"
		if s.Parked >= 0 {
			parked = strconv.FormatInt(s.Parked, 10)
		}
		if !s.OldestDue.IsZero() {
			due = s.OldestDue.Format(time.RFC3339)
		}
		blocked := "-"
		if s.Partitions > 0 {
			blocked = fmt.Sprintf("%d of %d", s.BlockedPartitions, s.Partitions)
		}
		state := s.State
		if !s.PausedUntil.IsZero() && !s.PausedUntil.Equal(destination.Forever) {
			state += " until " + s.PausedUntil.Format(time.RFC3339)
		}
		age := "-"
		if !s.OldestUndelivered.IsZero() {
			age = time.Since(s.OldestUndelivered).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%d\t%s\t%s\n", s.Dest, state, s.Backlog, s.InFlight, s.Retrying, parked, due, s.DeadLetters, age, blocked)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if routed && o.dest == "" {
		fmt.Fprintf(w, "typed events: %d routed, %d copies for subscribers, %d without a subscriber (counted, not dead-lettered); %d not routed yet\n",
			rs.Events, rs.Copies, rs.Unsubscribed, lag)
	}
	for _, s := range all {
		if s.Unconsumed != "" {
			fmt.Fprintf(w, "%s: not consumed, its events wait in the log: %s\n", s.Dest, s.Unconsumed)
		}
		if f := s.DeadLetterFailures; f != nil {
			fmt.Fprintf(w, "%s: %d events could not be dead-lettered and stay in the event log (the last, event %s at seq %d, at %s: %s); 'relay replay --dest %s' delivers them again\n",
				s.Dest, f.Count, f.LastEventID, f.LastSeq, f.LastAt.Format(time.RFC3339), f.LastError, s.Dest)
		}
	}
	return nil
}

// typedJSON is the router's line of 'stats --json'.
type typedJSON struct {
	Events       uint64 `json:"routed"`
	Copies       uint64 `json:"copies"`
	Unsubscribed uint64 `json:"unsubscribed"`
	Lag          uint64 `json:"not_routed_yet"`
}

// statsJSON is s as 'stats --json' prints it: without "parked" when Redis
// was not asked (relay.DestStats has -1 there, which is no count).
func statsJSON(s relay.DestStats) any {
	out := struct {
		relay.DestStats
		Parked *int64 `json:"parked,omitempty"`
	}{DestStats: s}
	if s.Parked >= 0 {
		out.Parked = &s.Parked
	}
	return out
}

// redisURLFlag and redisModeFlag are the flags of a command that reads or
// changes what is parked in Redis (relay run has its own, with more to say).
func redisURLFlag(usage string) cli.Flag {
	return &cli.StringFlag{Name: "redis-url", EnvVars: []string{"RELAY_REDIS_URL"}, Usage: usage}
}

func redisModeFlag() cli.Flag {
	return &cli.StringFlag{Name: "redis-mode", EnvVars: []string{"RELAY_REDIS_MODE"}, Value: "single", Usage: "single, cluster or sentinel"}
}

// redisOpts are the flags of a command that reads or changes what is
// parked in Redis.
type redisOpts struct {
	url, mode string
}

func readRedis(c *cli.Context) redisOpts {
	return redisOpts{url: c.String("redis-url"), mode: c.String("redis-mode")}
}

// Validate checks --redis-mode, if there is a --redis-url.
func (o redisOpts) Validate() error {
	if o.url == "" {
		return nil
	}
	_, err := redisMode(o.mode)
	return err
}

// open connects to --redis-url (nil without one), and returns what closes
// it.
func (o redisOpts) open(ctx context.Context, e *env) (*schedule.Store, func(), error) {
	if o.url == "" {
		return nil, func() {}, nil
	}
	log, err := e.logger()
	if err != nil {
		return nil, nil, err
	}
	redis.SetLogger(redisLog{log}) // go-redis's lines, at debug
	st, err := schedule.Dial(ctx, o.url, o.mode)
	if err != nil {
		return nil, nil, err
	}
	return st, func() { st.Client().Close() }, nil
}

// redisMode is --redis-mode m, checked.
func redisMode(m string) (string, error) {
	if err := replica.CheckRedisMode(m); err != nil {
		return "", asUsage(err)
	}
	return m, nil
}
