package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLicenseIsApache2 holds the repository's license to the one Knative, OCM and DSF use, and the
// README to naming it: without a license file nobody may use or fork the code.
func TestLicenseIsApache2(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repo, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Apache License", "Version 2.0, January 2004", "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("LICENSE does not contain %q", want)
		}
	}
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "Apache License 2.0 ([LICENSE](LICENSE))") {
		t.Error("README.md does not name the license and link LICENSE")
	}
}
