package function

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
)

// EnvName is the environment variable that backs a flag: --broker-url is BROKER_URL.
func EnvName(flagName string) string {
	return strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// ApplyEnv sets every flag not given on the command line from its environment variable, so the
// same binary is configured by flags locally and by env in a Knative Service. Flags win over env.
func ApplyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []string
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		if v, ok := lookup(EnvName(f.Name)); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Sprintf("%s=%q: %v", EnvName(f.Name), v, err))
			}
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("bad environment: %s", strings.Join(errs, "; "))
	}
	return nil
}

// usage prints a function's help: what it does, then each flag with its env variable and default.
func usage(fs *flag.FlagSet, name, about string) func() {
	return func() {
		w := fs.Output()
		fmt.Fprintf(w, "%s: %s\n\nUsage: %s [flags]\n\nEvery flag can also be set by the environment variable shown; a flag given on the command line wins.\n\n", name, about, name)
		var flags []*flag.Flag
		fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f) })
		sort.Slice(flags, func(i, j int) bool { return flags[i].Name < flags[j].Name })
		for _, f := range flags {
			def := ""
			if f.DefValue != "" {
				def = fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(w, "  --%s  [env %s]%s\n      %s\n", f.Name, EnvName(f.Name), def, f.Usage)
		}
	}
}

func osLookup(k string) (string, bool) { return os.LookupEnv(k) }
