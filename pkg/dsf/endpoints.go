package dsf

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// Endpoints is the deployment's optional rewrite of hosts: where a host that DynamicScorer specs
// and scorers' /config answers write really is, for a cluster where it is elsewhere. A key is a
// host as written, scheme://host[:port], placeholders included (DSF's samples write
// http://<NodeIP>:30007 and http://${EXTERNAL_SCORER_IP}:8000 for the user to fill in); a value is
// an http(s) base URL, possibly with a path prefix. A host that is not listed is contacted as
// written: which hosts may be contacted is the hub's DynamicScorers' business (whoever may create
// them), not a list in scoreflow's manifests. A placeholder nobody filled in is never a host.
type Endpoints map[string]string

// ParseEndpoints reads entries separated by commas, spaces or newlines, each NAME=URL (NAME is
// found at URL) or URL (found where it says).
func ParseEndpoints(s string) (Endpoints, error) {
	e := Endpoints{}
	for _, entry := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' || r == '\r' }) {
		name, target, mapped := strings.Cut(entry, "=")
		if !mapped {
			target = name
		}
		key, rest, err := origin(name)
		if err != nil {
			return nil, fmt.Errorf("endpoint %q: %v", entry, err)
		}
		if rest != "" && rest != "/" {
			return nil, fmt.Errorf("endpoint %q: %q has a path; name a host as scheme://host[:port]", entry, name)
		}
		u, err := url.Parse(target)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return nil, fmt.Errorf("endpoint %q: %q is not an http(s) base URL (no user, query or fragment)", entry, target)
		}
		if prev, dup := e[key]; dup && prev != strings.TrimRight(target, "/") {
			return nil, fmt.Errorf("endpoint %q: %s is already mapped to %s", entry, key, prev)
		}
		e[key] = strings.TrimRight(target, "/")
	}
	return e, nil
}

// Resolve maps a URL as a spec or /config writes it to the URL to contact: rewritten when its host
// is mapped, else as written. It says why a URL cannot be contacted: not http(s), or a host that is
// still a placeholder.
func (e Endpoints) Resolve(raw string) (string, error) {
	key, rest, err := origin(raw)
	if err != nil {
		return "", err
	}
	if base, ok := e[key]; ok {
		out := base + rest
		if u, err := url.Parse(out); err != nil || u.Host == "" {
			return "", fmt.Errorf("%q mapped to %q is not a URL", raw, out)
		}
		return out, nil
	}
	if strings.ContainsAny(key, "<>${}") {
		return "", fmt.Errorf("%s is a placeholder, not a host: write the address in the DynamicScorer, or map it in ENDPOINTS (%s=<its URL>)", key, key)
	}
	out := key + rest
	if u, err := url.Parse(out); err != nil || u.Host == "" || u.User != nil {
		return "", fmt.Errorf("%q is not a URL", raw)
	}
	return out, nil
}

// sameOrigin reports whether two URLs as written name the same scheme://host[:port].
func sameOrigin(a, b string) bool {
	oa, _, errA := origin(a)
	ob, _, errB := origin(b)
	return errA == nil && errB == nil && oa == ob
}

// String lists the entries, sorted, as ParseEndpoints reads them.
func (e Endpoints) String() string {
	var out []string
	for k, v := range e {
		if k == v {
			out = append(out, k)
		} else {
			out = append(out, k+"="+v)
		}
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// origin splits an http(s) URL as written into its lower-cased scheme://host[:port] and the rest
// (path, query). It does not parse the host: specs carry placeholders such as <NodeIP> that no
// URL parser accepts.
func origin(raw string) (key, rest string, err error) {
	scheme, after, ok := strings.Cut(strings.TrimSpace(raw), "://")
	scheme = strings.ToLower(scheme)
	if !ok || (scheme != "http" && scheme != "https") {
		return "", "", fmt.Errorf("%q is not an http(s) URL", raw)
	}
	host := after
	if i := strings.IndexAny(after, "/?#"); i >= 0 {
		host, rest = after[:i], after[i:]
	}
	if host == "" || strings.ContainsAny(host, " \t\n@") {
		return "", "", fmt.Errorf("%q has no host", raw)
	}
	return scheme + "://" + strings.ToLower(host), rest, nil
}
