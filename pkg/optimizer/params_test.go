package optimizer

import (
	"strings"
	"testing"
)

// dsfMCPParams is DSF's MCP sample request as published, byte for byte:
// open-cluster-management-io/dynamic-scoring-framework@8fc014d,
// samples/dynamic-scoring-framework-mcp/examples/params.json.
const dsfMCPParams = `{
  "namespace": "default",
  "clusters": [
    {
      "name": "cluster1",
      "availablePolicies": [
        {
          "name": "policy-enable-mig-2g-cluster1"
        },
        {
          "name": "policy-enable-mig-3g-cluster1"
        },
        {
          "name": "policy-disable-mig-cluster1"
        }
      ]
    },
    {
      "name": "cluster2",
      "availablePolicies": [
        {
          "name": "policy-enable-mig-2g-cluster2"
        },
        {
          "name": "policy-enable-mig-3g-cluster2"
        },
        {
          "name": "policy-disable-mig-cluster2"
        }
      ]
    }
  ],
  "targetWorkloads": [
    {
      "name": "mwrs-app01"
    },
    {
      "name": "mwrs-app02"
    }
  ],
  "preference": {
    "addOnPlacementScore": "example-powerconsumption-score",
    "scoreDimensionFormat": "${app};${device}"
  }
}
`

// TestDecodesDSFMCPParams: the request DSF's MCP sample publishes decodes as the optimizer decodes
// every request, with DSF's spelling of the score's key; scoreflow's own spelling still works,
// and naming the score under both keys is refused.
func TestDecodesDSFMCPParams(t *testing.T) {
	var p Params
	if err := decode([]byte(dsfMCPParams), &p); err != nil {
		t.Fatalf("DSF's published params.json: %v", err)
	}
	if p.Preference.AddonPlacementScore != "example-powerconsumption-score" || p.Preference.ScoreDimensionFormat != "${app};${device}" ||
		len(p.Clusters) != 2 || len(p.Clusters[1].AvailablePolicies) != 3 || len(p.TargetWorkloads) != 2 {
		t.Errorf("decoded %+v", p)
	}

	var own Params
	if err := decode([]byte(strings.Replace(dsfMCPParams, `"addOnPlacementScore"`, `"addonPlacementScore"`, 1)), &own); err != nil {
		t.Fatalf("scoreflow's spelling: %v", err)
	}
	if own.Preference.AddonPlacementScore != "example-powerconsumption-score" {
		t.Errorf("scoreflow's spelling decoded %+v", own.Preference)
	}

	both := strings.Replace(dsfMCPParams, `"scoreDimensionFormat"`, `"addonPlacementScore": "other", "scoreDimensionFormat"`, 1)
	var twice Params
	if err := decode([]byte(both), &twice); err == nil || !strings.Contains(err.Error(), "preference.addOnPlacementScore") {
		t.Errorf("both keys: err = %v, want one naming preference.addOnPlacementScore", err)
	}
	var none Params
	noScore := strings.Replace(dsfMCPParams, `"addOnPlacementScore": "example-powerconsumption-score",`, "", 1)
	if err := decode([]byte(noScore), &none); err == nil || !strings.Contains(err.Error(), "preference.addonPlacementScore") {
		t.Errorf("no score: err = %v, want one naming preference.addonPlacementScore", err)
	}
}
