//! Version-specific kubelet behaviour that decides whether a new kubelet keeps running pods,
//! other than the container hash: one row per fact, each citing where upstream it lives. The
//! preflight checks (`analysis/preflight/`) read only this table for version facts.

use crate::kubelet::version::KubeletVersion;

/// One fact: from kubelet 1.`since` on, `what` holds (upstream: `source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fact {
    pub id: FactId,
    pub since: u8,
    pub what: &'static str,
    pub source: &'static str,
}

/// The facts preflight asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FactId {
    /// The dockershim and its flags are gone: the kubelet refuses `--container-runtime=docker`
    /// and the network-plugin flags.
    DockershimRemoved,
    /// `--node-labels` may not set `kubernetes.io`/`k8s.io` labels outside the allowed set.
    NodeLabelsRestricted,
    /// The CPU manager's checkpoint keys entries by pod UID and container name.
    CpuManagerCheckpointByPod,
    /// The device manager's checkpoint lists device IDs per NUMA node.
    DeviceCheckpointByNuma,
    /// The device manager reads a checkpoint written before 1.20 too.
    DeviceCheckpointV1Read,
    /// The device manager no longer reads a checkpoint written before 1.20.
    DeviceCheckpointV1Dropped,
    /// CRI v1alpha2 is no longer spoken: the runtime must serve runtime.v1.
    CriV1Alpha2Dropped,
    /// The legacy klog flags are removed: only `-v` and `--vmodule` remain.
    KlogFlagsRemoved,
    /// `--container-runtime` is removed.
    ContainerRuntimeFlagRemoved,
    /// `DisableCloudProviders` is on by default: an in-tree `--cloud-provider` stops the kubelet.
    InTreeCloudProvidersOff,
    /// `memorySwap.swapBehavior: UnlimitedSwap` fails the config's validation.
    UnlimitedSwapRemoved,
    /// `DisableCloudProviders` is GA: `--cloud-provider` may only be empty or `external`.
    OnlyExternalCloudProvider,
    /// The kubelet takes the cgroup driver from the runtime when the runtime reports one.
    CgroupDriverFromRuntime,
    /// The DRA manager's checkpoint format changed; an old one stops the kubelet.
    DraCheckpointV2,
    /// In-place pod resize is on by default; actuated resources are kept in a checkpoint.
    InPlaceResizeDefault,
    /// A static pod manifest that references an API object is refused (and its pod killed).
    StaticPodApiReferencesRefused,
    /// `failCgroupV1` defaults to true: the kubelet refuses to start on cgroup v1.
    FailCgroupV1Default,
    /// `--pod-infra-container-image` is removed.
    PodInfraImageFlagRemoved,
    /// The `gitRepo` volume plugin is off unless `GitRepoVolumeDriver` is set true.
    GitRepoVolumeOff,
}

/// The table, oldest first.
pub const FACTS: &[Fact] = &[
    Fact {
        id: FactId::NodeLabelsRestricted,
        since: 16,
        what: "--node-labels may set kubernetes.io / k8s.io labels only in the allowed set",
        source: "cmd/kubelet/app/options/options.go ValidateKubeletFlags",
    },
    Fact {
        id: FactId::CpuManagerCheckpointByPod,
        since: 18,
        what: "cpu_manager_state entries are keyed by pod UID, then container name",
        source: "pkg/kubelet/cm/cpumanager/state/checkpoint.go CPUManagerCheckpointV2",
    },
    Fact {
        id: FactId::DeviceCheckpointByNuma,
        since: 20,
        what: "the device-plugin checkpoint lists device IDs per NUMA node",
        source: "pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go PodDevicesEntry (DevicesPerNUMA)",
    },
    Fact {
        id: FactId::DeviceCheckpointV1Read,
        since: 23,
        what: "the device manager reads a checkpoint in the format before 1.20 when the current one does not parse",
        source: "pkg/kubelet/cm/devicemanager/manager.go readCheckpoint (kubernetes#102882)",
    },
    Fact {
        id: FactId::DockershimRemoved,
        since: 24,
        what: "the dockershim and its flags (--network-plugin, --cni-*, --docker-endpoint, …) are removed",
        source: "pkg/kubelet/dockershim removed; cmd/kubelet/app/options/options.go",
    },
    Fact {
        id: FactId::CriV1Alpha2Dropped,
        since: 26,
        what: "the kubelet speaks only CRI runtime.v1",
        source: "pkg/kubelet/cri/remote/remote_runtime.go",
    },
    Fact {
        id: FactId::KlogFlagsRemoved,
        since: 26,
        what: "the legacy klog flags are removed (only -v and --vmodule remain): the kubelet stops at an unknown flag",
        source: "k8s.io/component-base/logs (kubernetes#112120)",
    },
    Fact {
        id: FactId::ContainerRuntimeFlagRemoved,
        since: 27,
        what: "--container-runtime is removed",
        source: "cmd/kubelet/app/options/options.go",
    },
    Fact {
        id: FactId::InTreeCloudProvidersOff,
        since: 29,
        what: "DisableCloudProviders is on by default: an in-tree --cloud-provider stops the kubelet unless the gate is set false",
        source: "pkg/kubelet/kubelet.go NewMainKubelet",
    },
    Fact {
        id: FactId::DeviceCheckpointV1Dropped,
        since: 30,
        what: "the device manager no longer reads a checkpoint in the format before 1.20: it starts empty",
        source: "pkg/kubelet/cm/devicemanager/manager.go readCheckpoint (kubernetes#123398)",
    },
    Fact {
        id: FactId::UnlimitedSwapRemoved,
        since: 30,
        what: "memorySwap.swapBehavior may only be empty, LimitedSwap or NoSwap: UnlimitedSwap fails the config's validation",
        source: "pkg/kubelet/apis/config/validation (kubernetes#122745)",
    },
    Fact {
        id: FactId::OnlyExternalCloudProvider,
        since: 31,
        what: "DisableCloudProviders is GA: --cloud-provider may only be empty or external, and the gate cannot be set false",
        source: "pkg/kubelet/kubelet.go NewMainKubelet",
    },
    Fact {
        id: FactId::CgroupDriverFromRuntime,
        since: 31,
        what: "the cgroup driver is taken from the runtime's RuntimeConfig when it reports one",
        source: "pkg/kubelet/kubelet.go getCgroupDriverFromCRI",
    },
    Fact {
        id: FactId::DraCheckpointV2,
        since: 31,
        what: "dra_manager_state has a new format; the DRA manager fails on the old one",
        source: "pkg/kubelet/cm/dra/state/checkpoint.go",
    },
    Fact {
        id: FactId::InPlaceResizeDefault,
        since: 33,
        what: "in-place pod resize is on by default; actuated resources are checkpointed",
        source: "pkg/kubelet/allocation/allocation_manager.go",
    },
    Fact {
        id: FactId::GitRepoVolumeOff,
        since: 33,
        what: "the gitRepo volume plugin is off by default: it mounts only with GitRepoVolumeDriver=true, which is locked false from 1.36",
        source: "pkg/volume/git_repo/git_repo.go SetUpAt (kubernetes#129923, #136400)",
    },
    Fact {
        id: FactId::StaticPodApiReferencesRefused,
        since: 34,
        what: "PreventStaticPodAPIReferences is on by default: a static pod manifest that references an API object is refused, and its running pod killed",
        source: "pkg/kubelet/config/common.go tryDecodeSinglePod (kubernetes#131837)",
    },
    Fact {
        id: FactId::FailCgroupV1Default,
        since: 35,
        what: "failCgroupV1 defaults to true: the kubelet refuses to start on cgroup v1",
        source: "pkg/kubelet/apis/config/v1beta1/defaults.go",
    },
    Fact {
        id: FactId::PodInfraImageFlagRemoved,
        since: 35,
        what: "--pod-infra-container-image is removed (the runtime's sandbox image is used): the kubelet stops at an unknown flag",
        source: "cmd/kubelet/app/options/options.go (kubernetes#133779)",
    },
];

/// The row of `id`.
pub fn fact(id: FactId) -> &'static Fact {
    FACTS.iter().find(|f| f.id == id).unwrap_or(&FACTS[0])
}

/// Whether `id` holds for kubelet `v`.
pub fn holds(id: FactId, v: KubeletVersion) -> bool {
    v.minor() >= fact(id).since
}

/// Whether the upgrade `from` → `to` crosses `id` (it holds for `to` and not for `from`; with
/// `from` unknown, whether it holds for `to`).
pub fn crosses(id: FactId, from: Option<KubeletVersion>, to: KubeletVersion) -> bool {
    holds(id, to) && !from.is_some_and(|f| holds(id, f))
}

/// The klog flags 1.26 took away (component-base/logs; `-v` and `--vmodule` stay).
pub const KLOG_FLAGS: &[&str] = &[
    "--add-dir-header",
    "--alsologtostderr",
    "--log-backtrace-at",
    "--log-dir",
    "--log-file",
    "--log-file-max-size",
    "--logtostderr",
    "--one-output",
    "--skip-headers",
    "--skip-log-headers",
    "--stderrthreshold",
];

/// An in-tree cloud provider, and the kubelet minor whose build no longer has its code
/// (upstream: `source`): from then on `InitCloudProvider` finds no provider of that name and the
/// kubelet stops ("unknown cloud provider").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InTreeProvider {
    pub name: &'static str,
    pub removed: u8,
    pub source: &'static str,
}

/// The in-tree cloud providers (k8s.io/cloud-provider plugins.go `deprecatedCloudProviders`, the
/// names `IsDeprecatedInternal` knows), in the order their code was removed. While its code is
/// there, each one stops the kubelet from 1.29 as `IsDeprecatedInternal` unless
/// `DisableCloudProviders` is set false.
pub const IN_TREE_CLOUD_PROVIDERS: &[InTreeProvider] = &[
    InTreeProvider {
        name: "openstack",
        removed: 26,
        source: "kubernetes#67782",
    },
    InTreeProvider {
        name: "aws",
        removed: 27,
        source: "kubernetes#115838",
    },
    InTreeProvider {
        name: "azure",
        removed: 30,
        source: "kubernetes#122857",
    },
    InTreeProvider {
        name: "vsphere",
        removed: 30,
        source: "kubernetes#122937",
    },
    InTreeProvider {
        name: "gce",
        removed: 31,
        source: "kubernetes#124519",
    },
];

/// Kubelet flags or feature gates taken away in kubelet 1.`since` (upstream: `source`): a kubelet
/// given one stops at an unknown flag or an unrecognized feature gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    pub since: u8,
    pub names: &'static [&'static str],
    pub source: &'static str,
}

/// Flags removed besides those with a row of their own above, oldest first.
pub const REMOVED_FLAGS: &[Removed] = &[
    Removed {
        since: 27,
        names: &["--master-service-namespace"],
        source: "CHANGELOG-1.27",
    },
    Removed {
        since: 30,
        names: &["--azure-container-registry-config"],
        source: "kubernetes#122857",
    },
    Removed {
        since: 31,
        names: &["--keep-terminated-pod-volumes"],
        source: "kubernetes#122082",
    },
    Removed {
        since: 31,
        names: &["--iptables-masquerade-bit", "--iptables-drop-bit"],
        source: "kubernetes#122363",
    },
    Removed {
        since: 34,
        names: &["--cloud-config"],
        source: "kubernetes#130161",
    },
];

/// Feature gates removed from the gates every Kubernetes binary registers (the kubelet refuses an
/// unrecognized one in `--feature-gates` or its config's `featureGates`), from the release
/// notes of each minor, oldest first.
pub const REMOVED_FEATURE_GATES: &[Removed] = &[
    Removed {
        since: 25,
        names: &[
            "CSIVolumeFSGroupPolicy",
            "ConfigurableFSGroupPolicy",
            "PodDisruptionBudget",
            "SelectorIndex",
        ],
        source: "CHANGELOG-1.25",
    },
    Removed {
        since: 26,
        names: &["DynamicKubeletConfig"],
        source: "CHANGELOG-1.26",
    },
    Removed {
        since: 27,
        names: &[
            "ExpandCSIVolumes",
            "ExpandInUsePersistentVolumes",
            "ExpandPersistentVolumes",
            "ControllerManagerLeaderMigration",
            "CSIMigration",
            "CSIInlineVolume",
            "EphemeralContainers",
            "LocalStorageCapacityIsolation",
            "NetworkPolicyEndPort",
            "StatefulSetMinReadySeconds",
            "IdentifyPodOS",
            "DaemonSetUpdateSurge",
        ],
        source: "CHANGELOG-1.27",
    },
    Removed {
        since: 28,
        names: &[
            "AdvancedAuditing",
            "DelegateFSGroupToCSIDriver",
            "DevicePlugins",
            "DisableAcceleratorUsageMetrics",
            "EndpointSliceTerminatingCondition",
            "CSIStorageCapacity",
            "CSIMigrationGCE",
            "KubeletCredentialProviders",
            "MixedProtocolLBService",
            "ServiceInternalTrafficPolicy",
            "ServiceIPStaticSubrange",
            "WindowsHostProcessContainers",
        ],
        source: "CHANGELOG-1.28",
    },
    Removed {
        since: 30,
        names: &[
            "ExpandedDNSConfig",
            "ExperimentalHostUserNamespaceDefaultingGate",
            "IPTablesOwnershipCleanup",
            "KubeletPodResources",
            "KubeletPodResourcesGetAllocatable",
            "MinimizeIPTablesRestore",
            "ProxyTerminatingEndpoints",
            "RemoveSelfLink",
        ],
        source: "CHANGELOG-1.30",
    },
    Removed {
        since: 31,
        names: &[
            "APIPriorityAndFairness",
            "CSINodeExpandSecret",
            "ConsistentHTTPGetHandlers",
            "DefaultHostNetworkHostPortsInPodTemplates",
            "ServiceNodePortStaticSubrange",
            "SkipReadOnlyValidationGCE",
        ],
        source: "CHANGELOG-1.31",
    },
    Removed {
        since: 32,
        names: &[
            "CloudDualStackNodeIPs",
            "DRAControlPlaneController",
            "HPAContainerMetrics",
            "KMSv2",
            "KMSv2KDF",
            "LegacyServiceAccountTokenCleanUp",
            "MinDomainsInPodTopologySpread",
            "NewVolumeManagerReconstruction",
            "NodeOutOfServiceVolumeDetach",
            "ServerSideApply",
            "ServerSideFieldValidation",
            "StableLoadBalancerNodeSet",
            "ValidatingAdmissionPolicy",
            "ZeroLimitedNominalConcurrencyShares",
        ],
        source: "CHANGELOG-1.32",
    },
    Removed {
        since: 33,
        names: &[
            "AppArmor",
            "AppArmorFields",
            "CPUManager",
            "DisableCloudProviders",
            "DisableKubeletCloudCredentialProviders",
            "JobPodFailurePolicy",
            "KubeProxyDrainingTerminatingNodes",
            "PDBUnhealthyPodEvictionPolicy",
            "PersistentVolumeLastPhaseTransitionTime",
            "VolumeCapacityPriority",
        ],
        source: "CHANGELOG-1.33",
    },
    Removed {
        since: 34,
        names: &[
            "DevicePluginCDIDevices",
            "LegacySidecarContainers",
            "PodDisruptionConditions",
        ],
        source: "CHANGELOG-1.34",
    },
    Removed {
        since: 35,
        names: &["SizeMemoryBackedVolumes"],
        source: "CHANGELOG-1.35",
    },
    Removed {
        since: 35,
        names: &["AllowServiceLBStatusOnNonLB", "LoadBalancerIPMode"],
        source: "kubernetes#134552",
    },
    Removed {
        since: 36,
        names: &[
            "CSIMigrationPortworx",
            "InTreePluginPortworxUnregister",
            "WatchFromStorageWithoutResourceVersion",
        ],
        source: "CHANGELOG-1.36",
    },
    Removed {
        since: 36,
        names: &["HonorPVReclaimPolicy"],
        source: "kubernetes#135335",
    },
    Removed {
        since: 37,
        names: &[
            "APIServerTracing",
            "AnyVolumeDataSource",
            "BtreeWatchCache",
            "ConsistentListFromCache",
            "OrderedNamespaceDeletion",
            "RelaxedDNSSearchValidation",
            "ResilientWatchCacheInitialization",
            "RetryGenerateName",
            "SidecarContainers",
            "StreamingCollectionEncodingToJSON",
            "StreamingCollectionEncodingToProtobuf",
        ],
        source: "CHANGELOG-1.37",
    },
    Removed {
        since: 37,
        names: &["GangScheduling", "WorkloadAwarePreemption"],
        source: "kubernetes#139520",
    },
    Removed {
        since: 37,
        names: &[
            "PodLifecycleSleepAction",
            "PodLifecycleSleepActionAllowZero",
        ],
        source: "kubernetes#139721",
    },
    Removed {
        since: 37,
        names: &["PreventStaticPodAPIReferences"],
        source: "kubernetes#140226",
    },
    // Gates locked in 1.33 / 1.34 and out of the three-release emulation window by 1.37, as
    // the release-1.37 feature lists leave them out (read through a third-party 1.37 upgrade
    // catalogue, skyhook-io/radar, whose rows checked here against upstream PRs all held).
    Removed {
        since: 37,
        names: &[
            "AnonymousAuthConfigurableEndpoints",
            "AuthorizeNodeWithSelectors",
            "AuthorizeWithSelectors",
            "JobBackoffLimitPerIndex",
            "JobPodReplacementPolicy",
            "JobSuccessPolicy",
            "LogarithmicScaleDown",
            "SchedulerQueueingHints",
            "StructuredAuthenticationConfiguration",
        ],
        source: "the release-1.37 feature lists",
    },
];

/// The row that removes feature gate `gate` by kubelet `v`, if one does: kubelet `v` does not
/// know the gate (it refuses to start when given it), and what the gate switched is fixed.
pub fn removed_gate(gate: &str, v: KubeletVersion) -> Option<&'static Removed> {
    REMOVED_FEATURE_GATES
        .iter()
        .find(|r| v.minor() >= r.since && r.names.contains(&gate))
}

/// A feature gate locked to its default from kubelet 1.`since` (featuregate `LockToDefault`):
/// `SetFromMap` refuses any other value ("cannot set feature gate …, feature is locked to …"),
/// and a kubelet given one stops. Every Kubernetes binary registers the gates of
/// `pkg/features` and of `k8s.io/apiserver`, the kubelet too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Locked {
    pub name: &'static str,
    pub since: u8,
    pub default: bool,
}

const fn locked(name: &'static str, since: u8, default: bool) -> Locked {
    Locked {
        name,
        since,
        default,
    }
}

/// The locked gates, oldest lock first, from the versioned feature specs
/// (`pkg/features/kube_features.go`, `versioned_kube_features.go`) on the 1.32, 1.33 and 1.36
/// development branches, the 1.36 release notes to v1.36.0-rc.0 (kubernetes#135808, #136230,
/// #136912), kubernetes#136400 (`GitRepoVolumeDriver`, 1.36), and for 1.37 the release-1.37
/// feature lists (read as the removals above were), of which these were seen upstream:
/// kubernetes#139212 (`DeclarativeValidationTakeover`), #140488
/// (`PodReadyToStartContainersCondition`), #140728 (`InPlacePodVerticalScalingInitContainers`),
/// #140805 (`PLEGOnDemandRelist`) and the 1.37 release blog (`NodeDeclaredFeatures`).
/// A gate locked and removed before 1.32 is known only by its row in [`REMOVED_FEATURE_GATES`].
pub const LOCKED_FEATURE_GATES: &[Locked] = &[
    locked("WatchBookmark", 17, true),
    locked("EfficientWatchResumption", 24, true),
    locked("CPUManager", 26, true),
    locked("APIListChunking", 29, true),
    locked("RemainingItemCount", 29, true),
    locked("AdmissionWebhookMatchConditions", 30, true),
    locked("AggregatedDiscoveryEndpoint", 30, true),
    locked("HPAContainerMetrics", 30, true),
    locked("LegacyServiceAccountTokenCleanUp", 30, true),
    locked("PodHostIPs", 30, true),
    locked("PodSchedulingReadiness", 30, true),
    locked("ZeroLimitedNominalConcurrencyShares", 30, true),
    locked("AppArmor", 31, true),
    locked("AppArmorFields", 31, true),
    locked("DevicePluginCDIDevices", 31, true),
    locked("DisableCloudProviders", 31, true),
    locked("DisableKubeletCloudCredentialProviders", 31, true),
    locked("ElasticIndexedJob", 31, true),
    locked("JobPodFailurePolicy", 31, true),
    locked("KubeProxyDrainingTerminatingNodes", 31, true),
    locked("LogarithmicScaleDown", 31, true),
    locked("PDBUnhealthyPodEvictionPolicy", 31, true),
    locked("PersistentVolumeLastPhaseTransitionTime", 31, true),
    locked("PodDisruptionConditions", 31, true),
    locked("StatefulSetStartOrdinal", 31, true),
    locked("AllowServiceLBStatusOnNonLB", 32, false),
    locked("CronJobsScheduledAnnotation", 32, true),
    locked("CustomResourceFieldSelectors", 32, true),
    locked("LoadBalancerIPMode", 32, true),
    locked("MemoryManager", 32, true),
    locked("PodIndexLabel", 32, true),
    locked("RetryGenerateName", 32, true),
    locked("ServiceAccountTokenJTI", 32, true),
    locked("ServiceAccountTokenNodeBindingValidation", 32, true),
    locked("ServiceAccountTokenPodNodeInfo", 32, true),
    locked("SizeMemoryBackedVolumes", 32, true),
    locked("StatefulSetAutoDeletePVC", 32, true),
    locked("StrictCostEnforcementForVAP", 32, true),
    locked("StrictCostEnforcementForWebhooks", 32, true),
    locked("StructuredAuthorizationConfiguration", 32, true),
    locked("AnyVolumeDataSource", 33, true),
    locked("BtreeWatchCache", 33, true),
    locked("CPUManagerPolicyOptions", 33, true),
    locked("CRDValidationRatcheting", 33, true),
    locked("CSIMigrationPortworx", 33, true),
    locked("HonorPVReclaimPolicy", 33, true),
    locked("JobBackoffLimitPerIndex", 33, true),
    locked("JobSuccessPolicy", 33, true),
    locked("MatchLabelKeysInPodAffinity", 33, true),
    locked("NFTablesProxyMode", 33, true),
    locked("NodeInclusionPolicyInPodTopologySpread", 33, true),
    locked("RecursiveReadOnlyMounts", 33, true),
    locked("ServiceAccountTokenNodeBinding", 33, true),
    locked("ServiceTrafficDistribution", 33, true),
    locked("SidecarContainers", 33, true),
    locked("TopologyAwareHints", 33, true),
    locked("WatchFromStorageWithoutResourceVersion", 33, false),
    locked("APIServerTracing", 34, true),
    locked("AnonymousAuthConfigurableEndpoints", 34, true),
    locked("AuthorizeNodeWithSelectors", 34, true),
    locked("AuthorizeWithSelectors", 34, true),
    locked("ConsistentListFromCache", 34, true),
    locked("JobPodReplacementPolicy", 34, true),
    locked("KubeletCgroupDriverFromCRI", 34, true),
    locked("KubeletTracing", 34, true),
    locked("MultiCIDRServiceAllocator", 34, true),
    locked("NodeSwap", 34, true),
    locked("OrderedNamespaceDeletion", 34, true),
    locked("PodLifecycleSleepAction", 34, true),
    locked("PodLifecycleSleepActionAllowZero", 34, true),
    locked("RecoverVolumeExpansionFailure", 34, true),
    locked("RelaxedDNSSearchValidation", 34, true),
    locked("RelaxedEnvironmentVariableValidation", 34, true),
    locked("ResilientWatchCacheInitialization", 34, true),
    locked("SchedulerQueueingHints", 34, true),
    locked("SeparateTaintEvictionController", 34, true),
    locked("StreamingCollectionEncodingToJSON", 34, true),
    locked("StreamingCollectionEncodingToProtobuf", 34, true),
    locked("StructuredAuthenticationConfiguration", 34, true),
    locked("WinDSR", 34, true),
    locked("WinOverlay", 34, true),
    locked("AggregatedDiscoveryRemoveBetaType", 35, true),
    locked("AllowOverwriteTerminationGracePeriodSeconds", 35, false),
    locked("DisableAllocatorDualWrite", 35, true),
    locked("DynamicResourceAllocation", 35, true),
    locked("ExecProbeTimeout", 35, true),
    locked("ImageMaximumGCAge", 35, true),
    locked("InPlacePodVerticalScaling", 35, true),
    locked("JobManagedBy", 35, true),
    locked("PodObservedGenerationTracking", 35, true),
    locked("PreferSameTrafficDistribution", 35, true),
    locked("SupplementalGroupsPolicy", 35, true),
    locked("SystemdWatchdog", 35, true),
    locked("GitRepoVolumeDriver", 36, false),
    locked("MutableCSINodeAllocatableCount", 36, true),
    locked("SELinuxChangePolicy", 36, true),
    locked("SELinuxMountReadWriteOncePod", 36, true),
    locked("SeparateCacheWatchRPC", 36, false),
    locked("VolumeAttributesClass", 36, true),
    locked("DRAExtendedResource", 37, true),
    locked("DRAPrioritizedList", 37, true),
    locked("DRAResourceClaimDeviceStatus", 37, true),
    locked("DeclarativeValidationTakeover", 37, false),
    locked("DisableCPUQuotaWithExclusiveCPUs", 37, true),
    locked("HPAConfigurableTolerance", 37, true),
    locked("HostnameOverride", 37, true),
    locked("InPlacePodVerticalScalingInitContainers", 37, true),
    locked("NodeDeclaredFeatures", 37, true),
    locked("PLEGOnDemandRelist", 37, true),
    locked("PodReadyToStartContainersCondition", 37, true),
    locked("RelaxedServiceNameValidation", 37, true),
    locked("WatchCacheInitializationPostStartHook", 37, true),
];

/// An in-tree volume plugin whose code is gone from kubelet 1.`since`: its `VolumeSource` field
/// stays in the API, and a pod with such a volume gets "no volume plugin matched" from the
/// kubelet. From `pkg/api/pod/warnings.go` `warningsForPodSpecAndMeta` ("non-functional in
/// v1.`since`+"); the field as v1 JSON spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemovedVolumePlugin {
    pub field: &'static str,
    pub since: u8,
}

const fn removed_plugin(field: &'static str, since: u8) -> RemovedVolumePlugin {
    RemovedVolumePlugin { field, since }
}

/// The removed in-tree volume plugins, oldest first. Plugins moved to CSI (`awsElasticBlockStore`,
/// `gcePersistentDisk`, …) are not here: the kubelet hands them to the CSI driver.
pub const REMOVED_VOLUME_PLUGINS: &[RemovedVolumePlugin] = &[
    removed_plugin("photonPersistentDisk", 16),
    removed_plugin("scaleIO", 22),
    removed_plugin("flocker", 25),
    removed_plugin("quobyte", 25),
    removed_plugin("storageos", 25),
    removed_plugin("glusterfs", 26),
    removed_plugin("cephfs", 31),
    removed_plugin("rbd", 31),
];

/// Flags the dockershim removal took away (1.24).
pub const DOCKERSHIM_FLAGS: &[&str] = &[
    "--network-plugin",
    "--network-plugin-mtu",
    "--cni-bin-dir",
    "--cni-conf-dir",
    "--cni-cache-dir",
    "--docker-endpoint",
    "--image-pull-progress-deadline",
    "--experimental-dockershim-root-directory",
    "--non-masquerade-cidr",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fact_is_in_the_table_once_and_in_order() {
        let v = |m: u8| -> KubeletVersion { format!("1.{m}").parse().unwrap() };
        assert!(FACTS.windows(2).all(|w| w[0].since <= w[1].since));
        for f in FACTS {
            assert_eq!(fact(f.id), f);
            assert!(holds(f.id, v(f.since)) && !holds(f.id, v(f.since - 1)));
        }
        assert!(crosses(FactId::CriV1Alpha2Dropped, Some(v(25)), v(26)));
        assert!(!crosses(FactId::CriV1Alpha2Dropped, Some(v(26)), v(27)));
        assert!(crosses(FactId::CriV1Alpha2Dropped, None, v(27)));
        for table in [REMOVED_FLAGS, REMOVED_FEATURE_GATES] {
            assert!(table.windows(2).all(|w| w[0].since <= w[1].since));
            let mut names: Vec<_> = table.iter().flat_map(|r| r.names).collect();
            let n = names.len();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), n, "a name removed twice");
        }
        let l = LOCKED_FEATURE_GATES;
        assert!(l.windows(2).all(|w| w[0].since <= w[1].since));
        let mut names: Vec<_> = l.iter().map(|l| l.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), l.len(), "a gate locked twice");
        // A gate is locked before it is removed (featuregate's emulation rule since 1.31; the
        // 1.32 release notes named a removal that was reverted into a lock, kubernetes#128139).
        for r in REMOVED_FEATURE_GATES {
            for l in l.iter().filter(|l| r.names.contains(&l.name)) {
                assert!(
                    l.since < r.since,
                    "{} removed in 1.{} but locked in 1.{}",
                    l.name,
                    r.since,
                    l.since
                );
            }
        }
        let p = IN_TREE_CLOUD_PROVIDERS;
        assert!(p.windows(2).all(|w| w[0].removed <= w[1].removed));
        // From 1.31 only `external` or none is accepted: no provider outlives that.
        assert!(p
            .iter()
            .all(|p| p.removed <= fact(FactId::OnlyExternalCloudProvider).since));
    }
}
