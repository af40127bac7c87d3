// Package replica is the composition root of one relay replica, the thing
// 'relay run' starts: the NATS server or connection, relay's streams, the
// address policy, the destination store and the delivery engine, the
// promoter of waits parked in Redis, the HTTP API and the dashboard, and
// the metrics server. The CLI, the integration tests and relay-bench
// start a replica from the same Config.
//
// It is internal: it is the relay program's wiring, not a library; the
// engine and the packages it wires are the public face.
package replica

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/relaydev/relay/api"
	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/dlq"
	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/eventtype"
	"github.com/relaydev/relay/portal"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/relay"
	"github.com/relaydev/relay/schedule"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/embedded"
	"github.com/relaydev/relay/tenant"
	"github.com/relaydev/relay/ui"
)

// Replica is one running replica: made by New, started by Start (or Run),
// stopped by Stop.
type Replica struct {
	cfg Config
	log *slog.Logger

	nc     *nats.Conn
	js     jetstream.JetStream
	engine *relay.Relay

	// closers undo what Start set up, last first.
	closers []func()
	// cancel ends the engine's and the promoter's context.
	cancel  context.CancelFunc
	engined chan struct{} // closed when the engine's Run returned
	runErr  error         // the engine's Run's error, read after engined
	workers sync.WaitGroup
	stop    sync.Once
	stopErr error
}

// New returns the replica of cfg, with its defaults filled in, once cfg
// is valid (Config.Validate). It starts nothing.
func New(cfg Config) (*Replica, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Replica{cfg: cfg, log: cfg.Logger, engined: make(chan struct{})}, nil
}

// Run starts the replica and delivers until ctx ends or the engine fails,
// then stops it (Stop). Stopped while an embedded server still starts,
// it returns nil: a stop, not a failure.
func (r *Replica) Run(ctx context.Context) error {
	if err := r.Start(ctx); err != nil {
		if errors.Is(err, errStoppedEarly) {
			return nil
		}
		return err
	}
	select {
	case <-ctx.Done():
	case <-r.engined:
	}
	return r.Stop()
}

// errStoppedEarly is Start's error when its context ended while the
// embedded server started.
var errStoppedEarly = errors.New("stopped before relay started")

// Start sets the replica up and starts delivering: it returns once the
// engine, the promoter, the API and the metrics server run, or with the
// error that kept one from starting (then what had started is stopped).
// ctx bounds the setup only; Stop ends the delivery.
func (r *Replica) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	cfg, log := r.cfg, r.log
	r.js = cfg.JS
	if r.js == nil {
		if r.nc, err = r.connect(ctx); err != nil {
			return err
		}
		if r.js, err = jetstream.New(r.nc); err != nil {
			return err
		}
	} else {
		r.nc = cfg.JS.Conn()
	}
	setupCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var policy *egress.Policy
	allow, err := egress.ParseAllowNets(cfg.AllowNet)
	if err != nil {
		return &ConfigError{err.Error()}
	}
	if cfg.JS == nil {
		if err := r.setUpStreams(setupCtx); err != nil {
			return err
		}
		if policy, err = r.agreePolicy(setupCtx, allow); err != nil {
			return err
		}
	}
	if cfg.SkipTLSVerify {
		log.Warn("TLS certificates of destinations are NOT verified (--dangerously-skip-tls-verify)")
	}
	proxy, err := cfg.proxy()
	if err != nil {
		return err
	}
	if proxy != nil {
		log.Info("deliveries go through the egress proxy: relay resolves and vets each address, the proxy tunnels to it (CONNECT ip:port)", "proxy", proxy.String(), "no_proxy", proxy.NoProxy)
	}
	eopts := egress.Options{
		Guard:                 egress.Guard{Allow: allow},
		ConnectTimeout:        cfg.ConnectTimeout,
		TLSHandshakeTimeout:   cfg.TLSHandshakeTimeout,
		ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
		InsecureSkipVerify:    cfg.SkipTLSVerify,
		Proxy:                 proxy,
	}
	ecfg := relay.Config{JS: r.js, Logger: log, NetPolicy: policy, SecretKey: cfg.SecretKey, PreviousSecretKeys: cfg.PreviousSecretKeys, ShutdownGrace: cfg.ShutdownGrace, ParkThreshold: cfg.ParkThreshold, MaxInFlight: cfg.MaxInFlight, AckWait: cfg.AckWait,
		NoAttemptLog: cfg.NoAttemptLog, NoOperatorEvents: cfg.NoOperatorEvents, AlertBacklogAge: cfg.AlertBacklogAge, AlertDeadLetters: cfg.AlertDeadLetters, LogResponseBytes: cfg.LogResponseBytes,
		TracerProvider: cfg.TracerProvider,
		HTTPClient:     egress.NewClient(eopts),
		Dial:           egress.NewDialer(eopts),
		// Without ResponseHeaderTimeout: a client library's long poll is
		// its own to bound.
		KindHTTPClient: egress.NewClient(egress.Options{Guard: eopts.Guard, ConnectTimeout: eopts.ConnectTimeout, TLSHandshakeTimeout: eopts.TLSHandshakeTimeout, InsecureSkipVerify: eopts.InsecureSkipVerify, Proxy: proxy}),
	}
	var promoter *schedule.Promoter
	if cfg.RedisURL != "" {
		if ecfg.Schedule, err = r.openSchedule(setupCtx); err != nil {
			return err
		}
		promoter = &schedule.Promoter{Store: ecfg.Schedule, JS: r.js, Lease: cfg.ParkLease, Logger: log, TracerProvider: cfg.TracerProvider}
	} else {
		log.Info("no --redis-url: every retry wait is a delayed nak in JetStream, and each waiting event holds one of its destination's 10000 ack-pending slots")
	}
	// Set once the engine is made: until then, and until it runs, not
	// ready.
	var running atomic.Pointer[relay.Relay]
	if cfg.MetricsAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		ecfg.Metrics = relay.NewMetrics(reg)
		ecfg.Metrics.PerTenantDestination = cfg.MetricsTenantDestinations
		sc := relay.NewStateCollector(r.js, ecfg.Schedule)
		sc.PerTenantDestination = cfg.MetricsTenantDestinations
		reg.MustRegister(sc)
		sched := ecfg.Schedule
		if err := r.serveMetrics(reg, func(ctx context.Context) error {
			if err := relay.Ready(ctx, r.nc, r.js, sched); err != nil {
				return err
			}
			e := running.Load()
			if e == nil {
				return errors.New("starting")
			}
			return e.Serving()
		}); err != nil {
			return err
		}
	}
	// The catalog of event types, for the router and the API alike.
	catalog, err := eventtype.WatchCatalog(setupCtx, r.js, log)
	if err != nil {
		return err
	}
	r.onClose(catalog.Stop)
	ecfg.Catalog = catalog
	// The tenants' limits, for the engine and the API alike.
	policies, err := tenant.WatchPolicies(setupCtx, r.js, log)
	if err != nil {
		return err
	}
	r.onClose(policies.Stop)
	ecfg.Policies = policies
	replicas := func() int {
		if e := running.Load(); e != nil {
			return e.Replicas()
		}
		return 1
	}
	if cfg.APIAddr != "" {
		if err := r.serveAPI(setupCtx, destination.WithSecretKey(cfg.SecretKey, cfg.PreviousSecretKeys...), catalog, policies, replicas); err != nil {
			return err
		}
	}
	if cfg.Engine != nil {
		cfg.Engine(&ecfg)
	}
	if r.engine, err = relay.New(setupCtx, ecfg); err != nil {
		return err
	}
	running.Store(r.engine)
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel = stop
	if promoter != nil {
		r.workers.Go(func() { _ = promoter.Run(runCtx) })
	}
	go func() {
		defer close(r.engined)
		r.runErr = r.engine.Run(runCtx)
	}()
	return nil
}

// Stop stops delivering: in-flight deliveries finish within
// Config.ShutdownGrace, the rest go back to JetStream; then the promoter,
// the API, the metrics server, the connection and the embedded server
// stop. It returns the engine's error, if it failed; called again, it
// returns the same.
func (r *Replica) Stop() error {
	r.stop.Do(func() {
		if r.cancel != nil {
			r.cancel()
			<-r.engined
			r.workers.Wait()
			r.stopErr = r.runErr
			if r.runErr == nil && r.cfg.JS == nil {
				if err := r.nc.Flush(); err != nil {
					r.log.Warn("flushing the NATS connection", "err", err)
				}
			}
		}
		r.close()
	})
	return r.stopErr
}

// close undoes what Start set up, last first.
func (r *Replica) close() {
	for _, c := range slices.Backward(r.closers) {
		c()
	}
	r.closers = nil
}

func (r *Replica) onClose(f func()) { r.closers = append(r.closers, f) }

// connect starts the embedded server unless there is a NATS URL, and
// connects to it.
func (r *Replica) connect(ctx context.Context) (*nats.Conn, error) {
	cfg, log := r.cfg, r.log
	url := cfg.NATSURL
	if url == "" {
		s, err := r.startEmbedded(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				// SIGINT or SIGTERM while it started: a stop, not a
				// failure.
				log.Info("stopped before relay started", "reason", err)
				return nil, fmt.Errorf("%w: %w", errStoppedEarly, err)
			}
			return nil, err
		}
		r.onClose(func() {
			s.Shutdown()
			s.WaitForShutdown()
		})
		url = s.ClientURL()
		log.Info("embedded NATS started", "url", url, "data_dir", cfg.DataDir, "sync_always", cfg.SyncAlways)
	}
	ccfg := cfg.Conn
	ccfg.URL = url
	ccfg.Logf = func(format string, args ...any) { log.Warn(fmt.Sprintf(format, args...)) }
	nc, err := stream.Connect(ccfg)
	if err != nil {
		return nil, err
	}
	r.onClose(nc.Close)
	return nc, nil
}

// embeddedServer is what a replica uses of the embedded NATS server.
type embeddedServer interface {
	ClientURL() string
	Shutdown()
	WaitForShutdown()
}

// startEmbedded starts the embedded NATS server of DataDir and Listen.
func (r *Replica) startEmbedded(ctx context.Context) (embeddedServer, error) {
	cfg, log := r.cfg, r.log
	host, port, err := splitListen(cfg.Listen)
	if err != nil {
		return nil, err
	}
	ecfg := embedded.Config{
		Name:       cfg.ServerName,
		DataDir:    cfg.DataDir,
		Host:       host,
		Port:       port,
		SyncAlways: cfg.SyncAlways,
		User:       cfg.Conn.User,
		Password:   cfg.Conn.Password,
		Token:      cfg.Conn.Token,
		Mappings:   stream.Mappings(),
		Logf: func(format string, args ...any) {
			log.Debug(fmt.Sprintf(format, args...))
		},
		Recovering: func(waited time.Duration) {
			log.Info("embedded NATS is still recovering its JetStream store; the larger the store, the longer this takes", "waited", waited.Round(time.Second), "data_dir", cfg.DataDir)
		},
	}
	if cfg.ClusterName != "" {
		chost, cport, err := splitListen(cfg.ClusterListen)
		if err != nil {
			return nil, err
		}
		ecfg.ClusterName, ecfg.ClusterHost, ecfg.ClusterPort, ecfg.Routes = cfg.ClusterName, chost, cport, cfg.Routes
		ecfg.ClusterSecret = string(cfg.ClusterSecret)
	}
	s, err := embedded.StartContext(ctx, ecfg)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// setUpStreams creates or updates relay's streams and buckets, and warns
// when the delivery log came out smaller than its default.
func (r *Replica) setUpStreams(ctx context.Context) error {
	cfg, log := r.cfg, r.log
	if err := ensureRetrying(ctx, log, r.js, cfg.Streams()); err != nil {
		return fmt.Errorf("set up streams: %w", err)
	}
	if cfg.AttemptMaxBytes == 0 && !cfg.NoAttemptLog {
		if ls, err := r.js.Stream(ctx, stream.LogStream); err == nil {
			if got := ls.CachedInfo().Config.MaxBytes; got > 0 && got < stream.DefaultLogMaxBytes {
				log.Warn("the delivery log is smaller than its default: the NATS server's storage is small (give --attempt-max-bytes to choose)", "max_bytes", got, "default", int64(stream.DefaultLogMaxBytes))
			}
		}
	}
	if len(cfg.PreviousSecretKeys) > 0 {
		log.Info("secrets sealed with the previous secret key open too, until 'relay dest rekey' seals them with the current one")
	}
	if len(cfg.SecretKey) == 0 {
		log.Warn("destination secrets are stored unencrypted in JetStream: set RELAY_SECRET_KEY or --secret-key-file to encrypt them")
	}
	return nil
}

// ensureRetrying sets up the streams, retrying while JetStream is not ready
// (a cluster still electing its leaders answers with errors for a while, or
// not at all: a request sent before the meta leader exists may never be
// answered, so each attempt has a deadline of its own).
func ensureRetrying(ctx context.Context, log *slog.Logger, js jetstream.JetStream, cfg stream.Config) error {
	for {
		actx, cancel := context.WithTimeout(ctx, ensureAttemptTimeout)
		err := stream.Ensure(actx, js, cfg)
		cancel()
		if err == nil {
			return nil
		}
		if errors.Is(err, stream.ErrIncompatible) || cfg.WithDefaults().Validate() != nil {
			return err
		}
		log.Warn("JetStream not ready; retrying", "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

// ensureAttemptTimeout bounds one attempt of ensureRetrying.
const ensureAttemptTimeout = 10 * time.Second

// agreePolicy logs the address policy of AllowNet and records it as the
// replicas', unless a live replica runs with another.
func (r *Replica) agreePolicy(ctx context.Context, allow []netip.Prefix) (*egress.Policy, error) {
	log := r.log
	policy := egress.Policy{Allow: allow}
	if len(allow) > 0 {
		log.Warn("address policy: deliveries may reach these non-public ranges", "allow_net", policy.String())
	} else {
		log.Info("address policy: deliveries reach public addresses only (--allow-net opens a range)")
	}
	// Every replica must run with the same policy; 'relay dest add'
	// checks URLs against the one recorded here.
	if err := egress.AgreePolicy(ctx, r.js, policy); err != nil {
		var pe *egress.PolicyError
		if errors.As(err, &pe) {
			return nil, &ConfigError{err.Error()}
		}
		return nil, err
	}
	return &policy, nil
}

// openSchedule connects to the Redis of RedisURL, with the replicas that
// must confirm each park.
func (r *Replica) openSchedule(ctx context.Context) (*schedule.Store, error) {
	cfg, log := r.cfg, r.log
	replicas, err := cfg.redisReplicas()
	if err != nil {
		return nil, err
	}
	st, err := schedule.Dial(ctx, cfg.RedisURL, cfg.RedisMode)
	if err != nil {
		return nil, err
	}
	client := st.Client()
	r.onClose(func() { client.Close() })
	if replicas > 0 {
		if st, err = st.WithReplicas(replicas, cfg.RedisReplicaWait); err != nil {
			return nil, &ConfigError{err.Error() + " (--redis-replica-wait, or read_timeout in --redis-url)"}
		}
		if n, err := st.ConnectedReplicas(ctx); err != nil {
			log.Warn("cannot read how many replicas the Redis primary has", "err", err)
		} else if n < replicas {
			log.Warn("the Redis primary has fewer replicas than --redis-replicas: until more connect, long waits stay in JetStream", "connected", n, "redis_replicas", replicas)
		}
	}
	log.Info("long waits are parked in Redis", "threshold", cfg.ParkThreshold, "replicas_confirming", replicas)
	return st, nil
}

// serveMetrics serves /metrics, /healthz and /readyz on MetricsAddr.
func (r *Replica) serveMetrics(reg *prometheus.Registry, ready func(context.Context) error) error {
	addr := r.cfg.MetricsAddr
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	profiles := servesProfiles(r.cfg.Pprof, ln.Addr())
	srv := &http.Server{Handler: relay.OpsHandler(reg, ready, profiles), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	r.onClose(func() { srv.Close() })
	r.log.Info("serving /metrics, /healthz and /readyz", "addr", ln.Addr().String(), "pprof", profiles)
	return nil
}

// servesProfiles says whether /debug/pprof/ is served on addr: with --pprof
// auto, only on a loopback address, where no one else reaches it.
func servesProfiles(mode string, addr net.Addr) bool {
	switch mode {
	case "on":
		return true
	case "off":
		return false
	}
	ap, err := netip.ParseAddrPort(addr.String())
	return err == nil && ap.Addr().IsLoopback()
}

// serveAPI serves the HTTP API and the dashboard on APIAddr; its
// destination store is opened with secretKey, as the engine's. It refuses
// a non-loopback address while no API key exists: the API would be open
// to the network with no way in but to create a key.
func (r *Replica) serveAPI(ctx context.Context, secretKey destination.StoreOption, catalog *eventtype.Catalog, policies *tenant.Policies, replicas func() int) error {
	cfg, log, js, tp := r.cfg, r.log, r.js, r.cfg.TracerProvider
	keys, err := api.OpenKeys(ctx, js)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		return fmt.Errorf("--api-addr %s: %w", cfg.APIAddr, err)
	}
	if ap, perr := netip.ParseAddrPort(ln.Addr().String()); perr != nil || !ap.Addr().IsLoopback() {
		all, err := keys.List(ctx)
		if err != nil {
			ln.Close()
			return err
		}
		if len(all) == 0 {
			ln.Close()
			return invalid("--api-addr %s is not a loopback address and no API key exists: create one first ('relay api-key create --name N --scope admin'), or serve the API on 127.0.0.1", cfg.APIAddr)
		}
	}
	prod, err := publish.NewProducer(ctx, js)
	if err != nil {
		ln.Close()
		return err
	}
	prod.TraceWith(tp)
	dests, err := destination.NewStore(ctx, js, secretKey)
	if err != nil {
		ln.Close()
		return err
	}
	letters, err := dlq.Open(ctx, js)
	if err != nil {
		ln.Close()
		return err
	}
	tenants, err := tenant.Open(ctx, js, nil)
	if err != nil {
		ln.Close()
		return err
	}
	types, err := eventtype.Open(ctx, js, nil)
	if err != nil {
		ln.Close()
		return err
	}
	sessions, err := portal.Open(ctx, js, nil)
	if err != nil {
		ln.Close()
		return err
	}
	limits := cfg.apiLimits()
	apiSrv := api.NewServer(api.Config{JS: js, Keys: keys, Producer: prod, Dests: dests, DeadLetters: letters.WithTracerProvider(tp), Tenants: tenants,
		EventTypes: types, Catalog: catalog, Policies: policies, Portal: sessions, PortalURL: cfg.PortalURL, EgressIPs: cfg.EgressIPs, Replicas: replicas, Logger: log, BodyTimeout: limits.bodyTimeout})
	dash, err := ui.New(ctx, ui.Config{API: apiSrv, JS: js, Secure: cfg.APITLSCert != "", Logger: log})
	if err != nil {
		ln.Close()
		return err
	}
	customers, err := ui.NewPortal(ctx, ui.PortalConfig{API: apiSrv, JS: js, Sessions: sessions, Tenants: tenants,
		FrameAncestors: slices.Clone(cfg.PortalFrameAncestors), Secure: cfg.APITLSCert != "", Logger: log})
	if err != nil {
		ln.Close()
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/ui/", dash)
	mux.Handle("/portal/", customers)
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	mux.Handle("/", apiSrv)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ln = limits.bound(srv, ln, cfg.MaxInFlight, log)
	scheme := "http"
	if cfg.APITLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.APITLSCert, cfg.APITLSKey)
		if err != nil {
			ln.Close()
			return invalid("--api-tls-cert/--api-tls-key: %v", err)
		}
		scheme = "https"
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		srv.Handler = withHSTS(srv.Handler)
		go func() { _ = srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { _ = srv.Serve(ln) }()
	}
	log.Info("serving the HTTP API, the dashboard and the customer portal", "url", scheme+"://"+ln.Addr().String()+"/v1", "document", scheme+"://"+ln.Addr().String()+"/v1/openapi.json", "dashboard", scheme+"://"+ln.Addr().String()+"/ui/", "portal", scheme+"://"+ln.Addr().String()+"/portal/")
	r.onClose(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	return nil
}
