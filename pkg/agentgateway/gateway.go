// Package agentgateway is the hub's door for agents on managed clusters: they never post to the
// Broker, they post CloudEvents here with a hub ServiceAccount token of their own
// (system:serviceaccount:<cluster>:<addon>, minted with pkg/hubtoken), and the gateway forwards
// what their cluster may say to the Broker under its own identity.
//
// For every request, before its body is read: the bearer token must verify against the hub's
// published signing keys (package auth: issuer, the gateway's audience, not expired, living at
// most an hour) and name the ServiceAccount of an addon in the gateway's table (its deployment's,
// LoadTable), which costs the hub nothing; then the API server must authenticate the token
// (TokenReview, its verdict reused for ReviewCacheTTL at most, within a budget per agent), and the
// cluster's ManagedClusterAddOn of that addon must exist and not be deleting (an informer:
// disabling the addon cuts the cluster off at once). Then the event: its type must be the addon's
// (the table), it must be valid, its resource one the addon's agents may score, every item must
// name the sender's cluster, and it may not ask never to expire. Which resources an addon's agents
// may score, the table either lists or says where on the hub they come from (ResourcesFrom): the
// resource the latency agents' AddOnTemplate configures for them, or those the hub's DynamicScorers
// produce (dsf.AgentResource) in the namespace the DSF agents' AddOnTemplate lets them read. These
// are watched (informers): a new DynamicScorer's resource is admitted as soon as the gateway sees
// it, a deleted one's refused, without a restart, so whoever may create DynamicScorers on the hub
// decides what the DSF agents may send. It goes to the Broker as a new event with the same id, time and data,
// source /scoreflow/agents/<addon>/<cluster> and the scoreflowresource extension; nothing else the
// agent set is forwarded, and a validUntil later than MaxScoreValidity from now (or none) becomes
// that, so a cut-off agent's scores lapse within it.
//
// Refusals: 401 (no or bad token, a token living over an hour), 403 (not an agent of the table,
// the addon not enabled for that cluster, a type, resource or cluster the sender may not use, with
// why, neverExpires), 400 (not a valid event), 429 (an agent minting tokens faster than its review
// budget), each with a score.failed under contract.MaxRefusalBytes, a log line and nothing
// forwarded; a 401 only after UnauthenticatedDelay. A failed forward answers 503, so the agent
// sends again.
package agentgateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonclient "open-cluster-management.io/api/client/addon/clientset/versioned"
	addoninformers "open-cluster-management.io/api/client/addon/informers/externalversions"
	addonlisters "open-cluster-management.io/api/client/addon/listers/addon/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/auth"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/hubtoken"
)

// MaxEventBytes bounds an agent's request body: one cluster's scores of one resource (at most
// contract.MaxScoresPerItem scores) fit many times over.
const MaxEventBytes = 256 << 10

// SourcePrefix begins the source of every event the gateway forwards:
// /scoreflow/agents/<addon>/<cluster>.
const SourcePrefix = "/scoreflow/agents/"

// Sender delivers an event to the Broker (function.Sender).
type Sender interface {
	Send(ctx context.Context, e event.Event) error
}

// Options configure a Gateway.
type Options struct {
	Table *Table
	// Audience is the audience agents' tokens must carry (default hubtoken.Audience).
	Audience string
	// Source names the gateway in its failure replies.
	Source string
	// MaxScoreValidity bounds how long an agent's scores stay valid after the gateway forwards
	// them (default DefaultMaxScoreValidity): a later or missing validUntil is set to that, and
	// neverExpires is refused. So a cut-off agent's scores lapse within it.
	MaxScoreValidity time.Duration
	// Now is the clock validity is counted from (default time.Now).
	Now func() time.Time
	// UnauthenticatedDelay is how long a 401 waits before it is answered (default
	// DefaultUnauthenticatedDelay; negative: none).
	UnauthenticatedDelay time.Duration
}

// DefaultUnauthenticatedDelay holds back every 401 (no token, or one that does not verify), by
// half to one and a half times it, at random: a client then gets about one such answer a second
// per connection, so a flood of forged tokens from any number of connections costs the gateway
// about a signature check a second per connection, and a waiting refusal costs a parked
// goroutine. The spread keeps a flood's connections from coming back all at once. Agents' tokens
// verify, and are never held back.
const DefaultUnauthenticatedDelay = time.Second

// unauthenticatedLogs bounds the log lines of 401s per second (a flood of forged tokens would
// otherwise write one each); scoreflow_agent_gateway_refused_total counts them all.
const unauthenticatedLogs = 10

// DefaultMaxScoreValidity is how long at most an agent's scores stay valid after the gateway
// forwarded them: two rounds of an agent scoring every five minutes.
const DefaultMaxScoreValidity = 10 * time.Minute

// Gateway checks agents' events and forwards them.
type Gateway struct {
	table      *Table
	validity   time.Duration
	now        func() time.Time
	delay      time.Duration // of a 401
	unauthLogs *rate.Limiter
	source     string
	review     *reviewer
	addons     addonlisters.ManagedClusterAddOnLister
	synced     func() bool
	start      func(stop <-chan struct{})
	resources  map[string]resourceCheck // by addon
	sink       Sender
	log        *slog.Logger
	refused    *prometheus.CounterVec
	received   *prometheus.CounterVec
	reviews    prometheus.Counter
}

// New makes a gateway with hub's identity: verifying tokens against the hub's published keys and
// its TokenReview, watching its ManagedClusterAddOns, and forwarding to sink. Start it before
// serving.
func New(hub *rest.Config, sink Sender, opts Options, log *slog.Logger, reg prometheus.Registerer) (*Gateway, error) {
	if opts.Table == nil {
		return nil, fmt.Errorf("no agents table")
	}
	if err := opts.Table.Validate(); err != nil {
		return nil, err
	}
	if opts.Audience == "" {
		opts.Audience = hubtoken.Audience
	}
	if opts.MaxScoreValidity <= 0 {
		opts.MaxScoreValidity = DefaultMaxScoreValidity
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.UnauthenticatedDelay == 0 {
		opts.UnauthenticatedDelay = DefaultUnauthenticatedDelay
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	kube, err := kubernetes.NewForConfig(hub)
	if err != nil {
		return nil, err
	}
	addons, err := addonclient.NewForConfig(hub)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(hub)
	if err != nil {
		return nil, err
	}
	keys, err := rest.HTTPClientFor(hub)
	if err != nil {
		return nil, err
	}
	verifier, err := auth.NewVerifier(auth.Options{Audience: opts.Audience, DiscoveryURL: hub.Host, Client: keys, MaxLifetime: MaxTokenLifetime})
	if err != nil {
		return nil, err
	}
	factory := addoninformers.NewSharedInformerFactoryWithOptions(addons, informerResync, addoninformers.WithTransform(slimAddOn))
	inf := factory.Addon().V1alpha1().ManagedClusterAddOns()
	g := &Gateway{table: opts.Table, source: opts.Source, validity: opts.MaxScoreValidity, now: opts.Now,
		delay: max(opts.UnauthenticatedDelay, 0), unauthLogs: rate.NewLimiter(unauthenticatedLogs, unauthenticatedLogs),
		addons: inf.Lister(), synced: inf.Informer().HasSynced, start: factory.Start, sink: sink, log: log, resources: map[string]resourceCheck{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_agent_gateway_refused_total",
			Help: "Agent requests refused, by reason and HTTP status.",
		}, []string{"reason", "code"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_agent_gateway_events_total",
			Help: "Events of admitted agents, by addon and result (forwarded, refused, failed: the Broker did not take it).",
		}, []string{"addon", "result"}),
		reviews: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "scoreflow_agent_gateway_token_reviews_total",
			Help: "TokenReviews sent to the hub: only for tokens the hub signed, one per token per ReviewCacheTTL.",
		}),
	}
	g.review = newReviewer(kube, verifier, opts.Audience, g.reviews.Inc)
	for _, a := range opts.Table.Agents {
		g.resources[a.Addon] = newResourceCheck(a, addons, dyn, log)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{g.refused, g.received, g.reviews} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return g, nil
}

// slimAddOn keeps of a ManagedClusterAddOn only what the gateway reads.
func slimAddOn(obj any) (any, error) {
	a, ok := obj.(*addonv1alpha1.ManagedClusterAddOn)
	if !ok {
		return obj, nil
	}
	out := &addonv1alpha1.ManagedClusterAddOn{}
	out.Name, out.Namespace, out.UID, out.ResourceVersion, out.DeletionTimestamp = a.Name, a.Namespace, a.UID, a.ResourceVersion, a.DeletionTimestamp
	return out, nil
}

// Start watches ManagedClusterAddOns, and the hub objects the table's resources come from, until
// ctx ends.
func (g *Gateway) Start(ctx context.Context) {
	g.start(ctx.Done())
	for _, r := range g.resources {
		r.start(ctx.Done())
	}
}

// Ready is nil once the ManagedClusterAddOn informer and those of the objects the table's
// resources come from have synced: before, every agent would look disabled, or its resources
// unknown.
func (g *Gateway) Ready() error {
	if !g.synced() {
		return fmt.Errorf("ManagedClusterAddOn informer has not synced")
	}
	for _, a := range g.table.Agents {
		if err := g.resources[a.Addon].ready(); err != nil {
			return err
		}
	}
	return nil
}

type identityKey struct{}

// IdentityFrom is the agent Authenticate admitted for the request handled under ctx.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// Handler is the gateway's whole HTTP surface on fn: agents' events on / (Authenticate in front of
// fn's CloudEvents receiver, which takes bodies of at most MaxEventBytes and gives each agent its
// own share of the admission budget), probes and metrics.
func (g *Gateway) Handler(fn *function.Function) http.Handler {
	fn.SetMaxBodyBytes(MaxEventBytes)
	return fn.Mux(g.Authenticate(fn.Handler(g.Handle, nil)))
}

// Authenticate admits to next only requests of an enabled agent of the table (see the package
// documentation), recording who sent them (IdentityFrom, function.CallerFrom); it reads no body.
func (g *Gateway) Authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ref := g.admit(r)
		if ref != nil {
			if ref.Status == http.StatusUnauthorized && g.delay > 0 {
				// Also when the client has gone: its connection is served, and counts against
				// the server's bound, until the wait is over.
				time.Sleep(g.delay/2 + rand.N(g.delay))
			}
			g.refuse(w, r, id, ref)
			return
		}
		ctx := function.WithCaller(context.WithValue(r.Context(), identityKey{}, id), id.String())
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func (g *Gateway) admit(r *http.Request) (Identity, *auth.Refusal) {
	token, err := auth.Bearer(r.Header)
	if err != nil {
		return Identity{}, auth.Refuse(err)
	}
	id, ref := g.review.check(r.Context(), token, func(addon string) bool { return g.table.agent(addon) != nil })
	if ref != nil {
		return id, ref
	}
	a, err := g.addons.ManagedClusterAddOns(id.Cluster).Get(id.Addon)
	switch {
	case apierrors.IsNotFound(err):
		return id, refusal(http.StatusForbidden, auth.ReasonNotAllowed, fmt.Sprintf("addon %s is not enabled for cluster %s", id.Addon, id.Cluster), nil)
	case err != nil:
		return id, refusal(http.StatusServiceUnavailable, contract.ReasonUnavailable, "cannot read the addon's state; retry", err)
	case a.DeletionTimestamp != nil:
		return id, refusal(http.StatusForbidden, auth.ReasonNotAllowed, fmt.Sprintf("addon %s is being disabled for cluster %s", id.Addon, id.Cluster), nil)
	}
	return id, nil
}

// refuse answers a refused request with a small score.failed, counts and logs it.
func (g *Gateway) refuse(w http.ResponseWriter, r *http.Request, id Identity, ref *auth.Refusal) {
	g.refused.WithLabelValues(string(ref.Reason), strconv.Itoa(ref.Status)).Inc()
	attrs := []any{"status", ref.Status, "reason", ref.Reason, "message", ref.Message, "cluster", id.Cluster, "addon", id.Addon,
		"remote", r.RemoteAddr, "ceId", contract.Truncate(r.Header.Get("Ce-Id"), contract.MaxIDLength),
		"ceSource", contract.Truncate(r.Header.Get("Ce-Source"), contract.MaxSourceLength)}
	if ref.Err != nil {
		attrs = append(attrs, "err", ref.Err.Error())
	}
	if ref.Status != http.StatusUnauthorized || g.unauthLogs.Allow() {
		g.log.Warn("agent request refused", attrs...)
	}
	ref.SetHeaders(w.Header())
	f, _ := contract.FitRefusal(g.failure(contract.EventRef{}, ref))
	if err := cehttp.WriteResponseWriter(r.Context(), binding.ToMessage(&f), ref.Status, w); err != nil {
		g.log.Error("writing refusal", "err", err)
	}
}

func (g *Gateway) failure(in contract.EventRef, ref *auth.Refusal) event.Event {
	return contract.NewFailure(g.source, contract.Failure{Input: in, Reason: ref.Reason, Message: ref.Message,
		Retriable: function.Retriable(ref.Status)})
}

// refusal is an answer of the gateway's own.
func refusal(status int, reason contract.Reason, message string, err error) *auth.Refusal {
	return &auth.Refusal{Status: status, Reason: reason, Message: message, Err: err}
}

// Handle checks an admitted agent's event (Authenticate put its identity in ctx) and forwards it.
func (g *Gateway) Handle(ctx context.Context, e event.Event) function.Response {
	id, ok := IdentityFrom(ctx)
	if !ok {
		// Only reachable if Handle is served without Authenticate in front of it.
		return g.respond(e, id, refusal(http.StatusUnauthorized, auth.ReasonUnauthenticated, "no verified agent", nil))
	}
	agent := g.table.agent(id.Addon)
	if agent == nil || !slices.Contains(agent.Types, e.Type()) {
		return g.respond(e, id, refusal(http.StatusForbidden, contract.ReasonForbidden,
			fmt.Sprintf("addon %s may not send type %q", id.Addon, contract.Truncate(e.Type(), contract.MaxTypeLength)), nil))
	}
	s, err := contract.DecodeScoreUpdated(&e)
	if err == nil {
		err = s.Validate()
	}
	if err != nil {
		return g.respond(e, id, refusal(http.StatusBadRequest, reasonOf(err), contract.Truncate(err.Error(), 300), nil))
	}
	if ref := g.resources[id.Addon].check(id.Addon, s.Resource); ref != nil {
		return g.respond(e, id, ref)
	}
	for i, it := range s.Items {
		if it.Cluster != id.Cluster {
			return g.respond(e, id, refusal(http.StatusForbidden, contract.ReasonForbidden,
				fmt.Sprintf("items[%d] scores cluster %q; the agent of cluster %s scores only its own", i, contract.Truncate(it.Cluster, 64), id.Cluster), nil))
		}
	}
	data, ref := g.bounded(s, e.Data())
	if ref != nil {
		return g.respond(e, id, ref)
	}
	out := cloudevents.NewEvent()
	out.SetID(e.ID())
	out.SetSource(SourcePrefix + id.Addon + "/" + id.Cluster)
	out.SetType(e.Type())
	if !e.Time().IsZero() {
		out.SetTime(e.Time())
	}
	out.SetSubject(s.Resource)
	out.SetExtension(contract.ExtResource, s.Resource)
	out.SetDataContentType(cloudevents.ApplicationJSON)
	out.DataEncoded = data
	if err := g.sink.Send(ctx, out); err != nil {
		g.received.WithLabelValues(id.Addon, "failed").Inc()
		return g.respond(e, id, refusal(http.StatusServiceUnavailable, contract.ReasonUnavailable, "the broker did not take the event; retry", err))
	}
	g.received.WithLabelValues(id.Addon, "forwarded").Inc()
	g.log.Debug("forwarded", "cluster", id.Cluster, "addon", id.Addon, "resource", s.Resource, "id", out.ID())
	return function.Response{Status: http.StatusAccepted}
}

// respond answers a refused or failed event, and logs it with who sent it (the receiver logs the
// status and reason too, without the sender).
func (g *Gateway) respond(e event.Event, id Identity, ref *auth.Refusal) function.Response {
	if id.Addon != "" && g.table.agent(id.Addon) != nil && ref.Status != http.StatusServiceUnavailable {
		g.received.WithLabelValues(id.Addon, "refused").Inc()
	}
	attrs := []any{"status", ref.Status, "reason", ref.Reason, "message", ref.Message, "cluster", id.Cluster, "addon", id.Addon}
	if ref.Err != nil {
		attrs = append(attrs, "err", ref.Err.Error())
	}
	g.log.Warn("agent event not forwarded", attrs...)
	f := g.failure(function.Ref(&e), ref)
	return function.Response{Status: ref.Status, Event: &f}
}

// bounded is data with s's validity within the gateway's bound: a validUntil later than that
// bound from now, or none, is set to it (the rest of the data is unchanged); neverExpires is
// refused, as the agent asks for what it may not have.
func (g *Gateway) bounded(s *contract.ScoreUpdated, data []byte) ([]byte, *auth.Refusal) {
	if s.NeverExpires {
		return nil, refusal(http.StatusForbidden, contract.ReasonForbidden,
			fmt.Sprintf("an agent's scores expire: set validUntil at most %s ahead, not neverExpires", g.validity), nil)
	}
	horizon := g.now().Add(g.validity).UTC().Truncate(time.Second)
	if s.ValidUntil != nil && !s.ValidUntil.After(horizon) {
		return data, nil
	}
	s.ValidUntil = &horizon
	b, err := json.Marshal(s)
	if err != nil {
		return nil, refusal(http.StatusBadRequest, contract.ReasonInvalidData, "cannot encode the scores", err)
	}
	return b, nil
}

// reasonOf is the reason of a validation error.
func reasonOf(err error) contract.Reason {
	var fes contract.FieldErrors
	if errors.As(err, &fes) {
		return fes.Reason()
	}
	return contract.ReasonInvalidData
}
