/**
 * The fleet's Kubernetes manifests (deploy/kubernetes/tether-fleet.yaml, shown whole in
 * docs/fleet.md), validated offline: every document against its API schema (the
 * kubernetes-models and @kubernetes-models/gateway-api packages, JSON schemas compiled with
 * ajv), and the fleet's rule checked on them: each host (pod) has a Service selecting it
 * alone, and each HTTPRoute rule sends one path prefix, stripped, to one such Service. No
 * cluster runs here: docs/fleet.md says so.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Gateway, HTTPRoute } from '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1';
import { StatefulSet } from 'kubernetes-models/apps/v1';
import { Service } from 'kubernetes-models/v1';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { fleetDocShows, REPO } from '../../helpers/front-door.js';

const FILE = 'deploy/kubernetes/tether-fleet.yaml';
const text = readFileSync(join(REPO, FILE), 'utf8');
type Doc = any;
const docs: Doc[] = parseAllDocuments(text).map((d) => {
  if (d.errors.length > 0) throw new Error(`${FILE}: ${d.errors[0]!.message}`);
  return d.toJS();
});

const MODELS: Record<string, new (data: Doc) => { validate(): void }> = {
  'apps/v1 StatefulSet': StatefulSet,
  'v1 Service': Service,
  'gateway.networking.k8s.io/v1 Gateway': Gateway,
  'gateway.networking.k8s.io/v1 HTTPRoute': HTTPRoute,
};
const of = (kind: string) => docs.filter((d) => d.kind === kind);

describe(`${FILE}, offline`, () => {
  it('docs/fleet.md shows the file whole', () => {
    expect(fleetDocShows(text)).toBe(true);
  });

  it('every document is valid against its API schema (and the validator refuses a broken one)', () => {
    expect(docs.map((d) => d.kind)).toEqual(['StatefulSet', 'Service', 'Service', 'Gateway', 'HTTPRoute']);
    for (const doc of docs) {
      const Model = MODELS[`${doc.apiVersion} ${doc.kind}`];
      expect(Model, `${doc.apiVersion} ${doc.kind} has a schema here`).toBeDefined();
      expect(() => new Model!(doc).validate(), `${doc.kind} ${doc.metadata.name}`).not.toThrow();
    }
    const route = structuredClone(of('HTTPRoute')[0]);
    route.spec.rules[0].matches[0].path.type = 'Prefix';
    expect(() => new HTTPRoute(route).validate()).toThrow(/path\/type must be equal to one of the allowed values/);
    const service = structuredClone(of('Service')[0]);
    service.spec.ports[0].port = '8765';
    expect(() => new Service(service).validate()).toThrow(/port must be integer/);
  });

  it('each host has a Service selecting its pod alone, and each route rule sends one prefix, stripped, to one of them', () => {
    const [set] = of('StatefulSet');
    const pods = Array.from({ length: set.spec.replicas as number }, (_, i) => `${set.metadata.name}-${i}`);
    const services = of('Service');
    expect(services.map((s) => s.spec.selector)).toEqual(pods.map((pod) => ({ 'statefulset.kubernetes.io/pod-name': pod })));
    const container = set.spec.template.spec.containers[0];
    for (const s of services) expect(s.spec.ports).toEqual([{ name: 'ws', port: 8765, targetPort: container.ports[0].name }]);
    expect(container.readinessProbe.httpGet.path).toBe('/readyz');
    expect(container.livenessProbe.httpGet.path).toBe('/livez');

    const [route] = of('HTTPRoute');
    expect(route.spec.parentRefs).toEqual([{ name: of('Gateway')[0].metadata.name }]);
    const routed = route.spec.rules.map((rule: Doc) => {
      expect(rule.backendRefs, 'one backend per rule: never balanced').toHaveLength(1);
      expect(rule.filters).toEqual([{ type: 'URLRewrite', urlRewrite: { path: { type: 'ReplacePrefixMatch', replacePrefixMatch: '/' } } }]);
      expect(rule.matches).toEqual([{ path: { type: 'PathPrefix', value: `/h/${rule.backendRefs[0].name}/` } }]);
      expect(rule.backendRefs[0].port).toBe(8765);
      return rule.backendRefs[0].name;
    });
    expect(routed).toEqual(services.map((s) => s.metadata.name));
  });
});
