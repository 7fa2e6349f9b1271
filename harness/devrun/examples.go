package devrun

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/harness/proc"
)

// PythonScorer is the Service of examples/python-scorer, the custom scorer in Python's standard
// library: the run applies its YAML (Service, Trigger, PingSource) and runs scorer.py as the
// Service's process, so its scores (AddOnPlacementScore "cost") appear beside the Go functions'.
const PythonScorer = "python-scorer"

// PythonScorerSource is the CloudEvents source the example names its score.updated by.
const PythonScorerSource = "scoreflow-examples/python-scorer"

// startPythonScorer applies examples/python-scorer/scorer.yaml and runs scorer.py with python3 on
// a free port, logging to logDir/python-scorer.log. Without python3 on PATH the run goes on
// without it (logged): the example is optional, the Go functions are not.
func (s *Stack) startPythonScorer(ctx context.Context, logDir string) error {
	dir := filepath.Join(s.opts.Root, "examples", "python-scorer")
	python, err := exec.LookPath("python3")
	if err != nil {
		s.opts.Log.Warn("python3 is not on PATH: the Python example scorer does not run", "example", dir)
		return nil
	}
	objs, err := knlocal.ReadFiles(filepath.Join(dir, "scorer.yaml"))
	if err != nil {
		return err
	}
	if err := s.Knative.Applier.Apply(ctx, objs...); err != nil {
		return err
	}
	port, err := proc.FreePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := s.Knative.ServeService(ctx, Namespace, PythonScorer, "http://"+addr); err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(logDir, PythonScorer+".log"))
	if err != nil {
		return err
	}
	s.python, err = proc.Start(proc.Spec{
		Name: PythonScorer,
		Path: python,
		Args: []string{"-u", filepath.Join(dir, "scorer.py")},
		Env:  append(os.Environ(), fmt.Sprintf("PORT=%d", port), "ADDRESS=127.0.0.1"),
		Out:  log,
	})
	if err != nil {
		_ = log.Close()
		return err
	}
	if err := s.python.WaitPort(addr, 20*time.Second); err != nil {
		return fmt.Errorf("%s: %w; see %s", PythonScorer, err, log.Name())
	}
	return nil
}
