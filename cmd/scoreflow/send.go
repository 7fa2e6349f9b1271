package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// extensions collects repeated -e name=value flags.
type extensions map[string]string

func (e extensions) String() string { return fmt.Sprint(map[string]string(e)) }
func (e extensions) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("%q: want name=value", v)
	}
	e[k] = val
	return nil
}

func send(args []string) error {
	fs := flag.NewFlagSet("send", flag.ContinueOnError)
	target := fs.String("broker", envOr("SCOREFLOW_BROKER", runningBroker()), "broker ingress URL (env SCOREFLOW_BROKER; default: the one `scoreflow run` started)")
	typ := fs.String("type", contract.TypeScoreUpdated, "CloudEvent type")
	source := fs.String("source", "scoreflow/cli", "CloudEvent source")
	id := fs.String("id", "", "CloudEvent id (default: a new UUID; repeat one to see deduplication)")
	at := fs.String("time", "", "CloudEvent time, RFC 3339 (default: now)")
	subject := fs.String("subject", "", "CloudEvent subject")
	data := fs.String("data", "", "JSON data, @file, or - for standard input")
	token := fs.String("token-file", envOr("SCOREFLOW_TOKEN_FILE", runningToken()), "bearer token to present, for a broker with sender identity on (env SCOREFLOW_TOKEN_FILE; default: the one `scoreflow run --oidc` issued)")
	caFile := fs.String("ca-file", envOr("SCOREFLOW_CA_FILE", runningCA()), "PEM CA certificate to trust besides the system's, for an https broker (env SCOREFLOW_CA_FILE; default: the one `scoreflow run --tls` made)")
	ext := extensions{}
	fs.Var(ext, "e", "extension name=value (repeatable), e.g. -e scorer=promql-scorer")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "scoreflow send: POST one CloudEvent (binary mode) and print the answer.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *target == "" {
		return errors.New("no broker: start one with `scoreflow run` (or `make run`), or give --broker / SCOREFLOW_BROKER")
	}
	body, err := readData(*data)
	if err != nil {
		return err
	}
	e := cloudevents.NewEvent()
	e.SetID(*id)
	if *id == "" {
		e.SetID(uuid.NewString())
	}
	e.SetType(*typ)
	e.SetSource(*source)
	e.SetTime(time.Now())
	if *at != "" {
		t, err := time.Parse(time.RFC3339Nano, *at)
		if err != nil {
			return fmt.Errorf("--time: %w", err)
		}
		e.SetTime(t)
	}
	if *subject != "" {
		e.SetSubject(*subject)
	}
	for k, v := range ext {
		e.SetExtension(k, v)
	}
	if len(body) > 0 {
		if !json.Valid(body) {
			return errors.New("--data is not valid JSON")
		}
		if err := e.SetData(cloudevents.ApplicationJSON, body); err != nil {
			return err
		}
	}
	stampResource(&e)
	req, err := http.NewRequest(http.MethodPost, *target, nil)
	if err != nil {
		return err
	}
	if err := cehttp.WriteRequest(context.Background(), binding.ToMessage(&e), req); err != nil {
		return err
	}
	if *token != "" {
		tok, err := os.ReadFile(*token)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	client, err := clientTrusting(*caFile)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("is `make run` running? %w", err)
	}
	defer resp.Body.Close()
	reply, _ := io.ReadAll(resp.Body)
	fmt.Printf("%s %s -> %s\n", e.Type(), e.ID(), resp.Status)
	if len(bytes.TrimSpace(reply)) > 0 {
		fmt.Println(strings.TrimSpace(string(reply)))
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("refused: %s", resp.Status)
	}
	return nil
}

func readData(d string) ([]byte, error) {
	switch {
	case d == "-":
		return io.ReadAll(os.Stdin)
	case strings.HasPrefix(d, "@"):
		return os.ReadFile(d[1:])
	}
	return []byte(d), nil
}

// clientTrusting is a client that trusts, besides the system roots, the CA certificates in caFile
// (none: the default client).
func clientTrusting(caFile string) (*http.Client, error) {
	if caFile == "" {
		return http.DefaultClient, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca-file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--ca-file %s holds no PEM certificate", caFile)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: t}, nil
}

// stampResource names a score.updated's data.resource in the scoreflowresource extension, as
// every scoreflow producer does (an EventPolicy can admit a sender for its resources only), unless
// -e set the extension.
func stampResource(e *cloudevents.Event) {
	if e.Type() != contract.TypeScoreUpdated {
		return
	}
	if _, set := e.Extensions()[contract.ExtResource]; set {
		return
	}
	var d struct {
		Resource string `json:"resource"`
	}
	if json.Unmarshal(e.Data(), &d) == nil && d.Resource != "" {
		e.SetExtension(contract.ExtResource, d.Resource)
	}
}
