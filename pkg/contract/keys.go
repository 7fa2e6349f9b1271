package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// checkKeys walks a JSON document beside the Go type it decodes into and refuses what encoding/json
// would accept but another parser could read differently:
//   - a key repeated in one object (encoding/json keeps the last, many parsers the first);
//   - a struct field spelt in another case ("Resource" for "resource"): encoding/json matches it,
//     a case-sensitive reader such as the JSON Schemas finds an unknown field.
//
// Map keys (metric labels) stay case-sensitive: "a" and "A" are two labels. The document is known
// to be valid JSON when this runs.
func checkKeys(data []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return walk(dec, t, "")
}

func walk(dec *json.Decoder, t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		var fields map[string]reflect.Type
		var elem reflect.Type
		if t != nil {
			switch t.Kind() {
			case reflect.Struct:
				fields = jsonFields(t)
			case reflect.Map:
				elem = t.Elem()
			}
		}
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			key := kt.(string)
			if seen[key] {
				return fmt.Errorf("%sduplicate key %s: parsers disagree on which one counts", at(path), echo(key))
			}
			seen[key] = true
			child := elem
			if fields != nil {
				ft, ok := fields[key]
				if !ok {
					for name := range fields {
						if strings.EqualFold(name, key) {
							return fmt.Errorf("%skey %s is not %q: keys are case-sensitive", at(path), echo(key), name)
						}
					}
				}
				child = ft
			}
			childPath := Truncate(key, 64)
			if path != "" {
				childPath = path + "." + childPath
			}
			if err := walk(dec, child, childPath); err != nil {
				return err
			}
		}
		_, err = dec.Token() // '}'
		return err
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := walk(dec, elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ']'
		return err
	}
	return nil
}

// jsonFields maps a struct's JSON field names to their types, as encoding/json names them.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// at prefixes a message with where in the document it applies ("" at the top).
func at(path string) string {
	if path == "" {
		return ""
	}
	return path + ": "
}
