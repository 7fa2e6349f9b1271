package localhub

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"
	clusterv1beta2 "open-cluster-management.io/api/cluster/v1beta2"

	"github.com/scoreflow/scoreflow/tools"
)

// ClusterSetLabel puts a ManagedCluster in a ManagedClusterSet.
const ClusterSetLabel = clusterv1beta2.ClusterSetLabel

// PlacementController is the real OCM placement controller (open-cluster-management.io/ocm
// cmd/placement, built by `make tools`) running against the hub.
type PlacementController struct {
	// Addr is where it serves its health checks and debug endpoint (HTTPS, self-signed).
	Addr     string
	hub      *rest.Config
	cmd      *exec.Cmd
	done     chan error
	stopOnce sync.Once
}

// StartPlacementController runs the placement controller with the hub's admin kubeconfig. Its logs
// go to out (nil: discarded).
func (h *Hub) StartPlacementController(out io.Writer) (*PlacementController, error) {
	bin, err := tools.Path(tools.Placement)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(h.dir, "placement.kubeconfig")
	if err := h.WriteKubeconfig(kubeconfig); err != nil {
		return nil, err
	}
	listen, err := freeAddress()
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = io.Discard
	}
	cmd := exec.Command(bin, "controller", "--kubeconfig", kubeconfig, "--disable-leader-election",
		"--namespace", "open-cluster-management-hub", "--listen", listen)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, and killed if we die first, so no controller outlives a test or run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start placement controller: %w", err)
	}
	pc := &PlacementController{Addr: listen, hub: h.Config, cmd: cmd, done: make(chan error, 1)}
	go func() { pc.done <- cmd.Wait() }()
	return pc, nil
}

// PrioritizerResult is one prioritizer's part in the controller's scheduling of a Placement: its
// weight and each cluster's score (the total is the sum of weight x score).
type PrioritizerResult struct {
	Name   string           `json:"name"`
	Weight int32            `json:"weight"`
	Scores map[string]int64 `json:"scores"`
}

// Prioritize asks the running controller how it weighs a Placement's clusters now: its debug
// endpoint (ocm pkg/placement/debugger, /debug/placements/<namespace>/<name>) runs the scheduler
// on the current state, as a new schedule would, and answers each prioritizer's scores. It
// authenticates with the hub's admin client certificate, which the controller verifies against
// the hub's client CA; the controller's serving certificate is self-signed, so it is not checked.
func (pc *PlacementController) Prioritize(ctx context.Context, namespace, name string) ([]PrioritizerResult, error) {
	cert, err := tls.X509KeyPair(pc.hub.CertData, pc.hub.KeyData)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true}}} //nolint:gosec // a local controller's self-signed certificate
	// The controller reads the hub's client CA from the cluster once it runs; until then a client
	// certificate is not recognised and the request is refused as anonymous's.
	var (
		resp *http.Response
		body []byte
	)
	for deadline := time.Now().Add(30 * time.Second); ; {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+pc.Addr+"/debug/placements/"+namespace+"/"+name, nil)
		if err != nil {
			return nil, err
		}
		if resp, err = client.Do(req); err != nil {
			return nil, err
		}
		body, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		anonymous := resp.StatusCode == http.StatusForbidden && bytes.Contains(body, []byte("system:anonymous"))
		if !anonymous || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	var out struct {
		PrioritizeResults []PrioritizerResult `json:"prioritizeResults"`
		Error             string              `json:"error"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &out) != nil || out.Error != "" {
		return nil, fmt.Errorf("placement controller debug %s/%s: %s: %s", namespace, name, resp.Status, body)
	}
	return out.PrioritizeResults, nil
}

// Stop terminates the controller and waits for it. Safe to call twice.
func (pc *PlacementController) Stop() error {
	pc.stopOnce.Do(func() {
		_ = syscall.Kill(-pc.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-pc.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-pc.cmd.Process.Pid, syscall.SIGKILL)
			<-pc.done
		}
	})
	return nil
}

func freeAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// AddClusterSet creates a ManagedClusterSet selecting clusters by ClusterSetLabel and binds it to
// namespace (created if missing), so Placements there can choose among its clusters.
func (h *Hub) AddClusterSet(ctx context.Context, set, namespace string) error {
	if _, err := h.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	_, err := h.Cluster.ClusterV1beta2().ManagedClusterSets().Create(ctx, &clusterv1beta2.ManagedClusterSet{
		ObjectMeta: metav1.ObjectMeta{Name: set},
		Spec: clusterv1beta2.ManagedClusterSetSpec{ClusterSelector: clusterv1beta2.ManagedClusterSelector{
			SelectorType: clusterv1beta2.ExclusiveClusterSetLabel,
		}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	_, err = h.Cluster.ClusterV1beta2().ManagedClusterSetBindings(namespace).Create(ctx, &clusterv1beta2.ManagedClusterSetBinding{
		ObjectMeta: metav1.ObjectMeta{Name: set, Namespace: namespace},
		Spec:       clusterv1beta2.ManagedClusterSetBindingSpec{ClusterSet: set},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// ScorePlacement is a Placement that picks the n clusters with the highest AddOn score
// resource/score from the given cluster set (prioritizer mode Exact: only that score counts).
func ScorePlacement(namespace, name, set, resource, score string, n int32) *clusterv1beta1.Placement {
	return &clusterv1beta1.Placement{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: clusterv1beta1.PlacementSpec{
			ClusterSets:      []string{set},
			NumberOfClusters: &n,
			PrioritizerPolicy: clusterv1beta1.PrioritizerPolicy{
				Mode: clusterv1beta1.PrioritizerPolicyModeExact,
				Configurations: []clusterv1beta1.PrioritizerConfig{{
					ScoreCoordinate: &clusterv1beta1.ScoreCoordinate{
						Type:  clusterv1beta1.ScoreCoordinateTypeAddOn,
						AddOn: &clusterv1beta1.AddOnScore{ResourceName: resource, ScoreName: score},
					},
					Weight: 1,
				}},
			},
		},
	}
}

// Dir is a scratch directory that lives as long as the hub.
func (h *Hub) Dir() string { return h.dir }
