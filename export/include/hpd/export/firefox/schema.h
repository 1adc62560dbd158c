// The Firefox Profiler's processed format (version 66): its table, column and meta key names, spelled
// once for the writer, the reader and the tests' linter (see docs/firefox-export.md).
#pragma once

namespace hpd::firefox {

// Every column table is {"length": N, column: [N values], ...}.
inline constexpr const char* kLength = "length";

// The top-level object.
namespace profile {
inline constexpr const char* kMeta = "meta";
inline constexpr const char* kLibs = "libs";
inline constexpr const char* kShared = "shared";
inline constexpr const char* kThreads = "threads";
}  // namespace profile

namespace meta {
inline constexpr const char* kVersion = "version";
inline constexpr const char* kPreprocessedProfileVersion = "preprocessedProfileVersion";
inline constexpr const char* kInterval = "interval";
inline constexpr const char* kStartTime = "startTime";
inline constexpr const char* kStartTimeAsClockMonotonicNs = "startTimeAsClockMonotonicNanosecondsSinceBoot";
inline constexpr const char* kProcessType = "processType";
inline constexpr const char* kProduct = "product";
inline constexpr const char* kStackwalk = "stackwalk";
inline constexpr const char* kDebug = "debug";
inline constexpr const char* kSymbolicated = "symbolicated";
inline constexpr const char* kPlatform = "platform";
inline constexpr const char* kOscpu = "oscpu";
inline constexpr const char* kUsesOnlyOneStackType = "usesOnlyOneStackType";
inline constexpr const char* kSourceCodeIsNotOnSearchfox = "sourceCodeIsNotOnSearchfox";
inline constexpr const char* kLogicalCpus = "logicalCPUs";
inline constexpr const char* kArguments = "arguments";
inline constexpr const char* kProfilingStartTime = "profilingStartTime";
inline constexpr const char* kProfilingEndTime = "profilingEndTime";
inline constexpr const char* kCategories = "categories";
inline constexpr const char* kSampleUnits = "sampleUnits";
inline constexpr const char* kInitialVisibleThreads = "initialVisibleThreads";
inline constexpr const char* kInitialSelectedThreads = "initialSelectedThreads";
inline constexpr const char* kMarkerSchema = "markerSchema";
inline constexpr const char* kExtra = "extra";
}  // namespace meta

// meta.categories[i]
namespace category {
inline constexpr const char* kName = "name";
inline constexpr const char* kColor = "color";
inline constexpr const char* kSubcategories = "subcategories";
}  // namespace category

// meta.sampleUnits
namespace sample_units {
inline constexpr const char* kTime = "time";
inline constexpr const char* kEventDelay = "eventDelay";
inline constexpr const char* kThreadCpuDelta = "threadCPUDelta";
}  // namespace sample_units

// meta.markerSchema[i] and its fields[k]
namespace marker_schema {
inline constexpr const char* kName = "name";
inline constexpr const char* kDisplay = "display";
inline constexpr const char* kChartLabel = "chartLabel";
inline constexpr const char* kTableLabel = "tableLabel";
inline constexpr const char* kTooltipLabel = "tooltipLabel";
inline constexpr const char* kDescription = "description";
inline constexpr const char* kFields = "fields";
inline constexpr const char* kFieldKey = "key";
inline constexpr const char* kFieldLabel = "label";
inline constexpr const char* kFieldFormat = "format";
inline constexpr const char* kFieldHidden = "hidden";
}  // namespace marker_schema

// meta.extra[i] (a section) and its entries[k]
namespace extra {
inline constexpr const char* kLabel = "label";
inline constexpr const char* kEntries = "entries";
inline constexpr const char* kFormat = "format";
inline constexpr const char* kValue = "value";
}  // namespace extra

// libs[i]
namespace lib {
inline constexpr const char* kArch = "arch";
inline constexpr const char* kName = "name";
inline constexpr const char* kPath = "path";
inline constexpr const char* kDebugName = "debugName";
inline constexpr const char* kDebugPath = "debugPath";
inline constexpr const char* kBreakpadId = "breakpadId";
inline constexpr const char* kCodeId = "codeId";
// Every key of a lib object.
inline constexpr const char* kAll[] = {kArch, kName, kPath, kDebugName, kDebugPath, kBreakpadId, kCodeId};
}  // namespace lib

// The tables of "shared", in the order the writer emits them.
namespace shared {
inline constexpr const char* kStringArray = "stringArray";
inline constexpr const char* kSources = "sources";
inline constexpr const char* kSourceLocationTable = "sourceLocationTable";
inline constexpr const char* kResourceTable = "resourceTable";
inline constexpr const char* kNativeSymbols = "nativeSymbols";
inline constexpr const char* kFuncTable = "funcTable";
inline constexpr const char* kFrameTable = "frameTable";
inline constexpr const char* kStackTable = "stackTable";
}  // namespace shared

namespace sources {
inline constexpr const char* kId = "id";
inline constexpr const char* kFilename = "filename";
inline constexpr const char* kStartLine = "startLine";
inline constexpr const char* kStartColumn = "startColumn";
inline constexpr const char* kSourceMapUrl = "sourceMapURL";
inline constexpr const char* kContent = "content";
// Every column of the table (besides length).
inline constexpr const char* kAll[] = {kId, kFilename, kStartLine, kStartColumn, kSourceMapUrl, kContent};
}  // namespace sources

namespace source_locations {
inline constexpr const char* kSource = "source";
inline constexpr const char* kLine = "line";
inline constexpr const char* kColumn = "column";
// Every column of the table (besides length).
inline constexpr const char* kAll[] = {kSource, kLine, kColumn};
}  // namespace source_locations

namespace resources {
inline constexpr const char* kLib = "lib";
inline constexpr const char* kName = "name";
inline constexpr const char* kHost = "host";
inline constexpr const char* kType = "type";
// Every column of the table (besides length).
inline constexpr const char* kAll[] = {kLib, kName, kHost, kType};
}  // namespace resources

namespace native_symbols {
inline constexpr const char* kLibIndex = "libIndex";
inline constexpr const char* kAddress = "address";
inline constexpr const char* kName = "name";
inline constexpr const char* kFunctionSize = "functionSize";
// Every column of the table (besides length).
inline constexpr const char* kAll[] = {kLibIndex, kAddress, kName, kFunctionSize};
}  // namespace native_symbols

namespace funcs {
inline constexpr const char* kName = "name";
inline constexpr const char* kIsJs = "isJS";
inline constexpr const char* kRelevantForJs = "relevantForJS";
inline constexpr const char* kResource = "resource";
inline constexpr const char* kSource = "source";
inline constexpr const char* kLineNumber = "lineNumber";
inline constexpr const char* kColumnNumber = "columnNumber";
inline constexpr const char* kOriginalLocation = "originalLocation";
// Every column of the table (besides length).
inline constexpr const char* kAll[] = {kName,   kIsJs,       kRelevantForJs, kResource,
                                       kSource, kLineNumber, kColumnNumber,  kOriginalLocation};
}  // namespace funcs

namespace frames {
inline constexpr const char* kAddress = "address";
inline constexpr const char* kInlineDepth = "inlineDepth";
inline constexpr const char* kCategory = "category";
inline constexpr const char* kSubcategory = "subcategory";
inline constexpr const char* kFunc = "func";
inline constexpr const char* kNativeSymbol = "nativeSymbol";
inline constexpr const char* kInnerWindowId = "innerWindowID";
inline constexpr const char* kLine = "line";
inline constexpr const char* kColumn = "column";
inline constexpr const char* kOriginalLocation = "originalLocation";
// Every column of the table (besides length).
inline constexpr const char* kAll[] = {kAddress, kInlineDepth,     kCategory,      kSubcategory,
                                       kFunc,    kNativeSymbol,    kInnerWindowId, kLine,
                                       kColumn,  kOriginalLocation};
}  // namespace frames

namespace stacks {
inline constexpr const char* kFrame = "frame";
// 0 = a root; else the prefix is that many rows back. Version 66 replaced the older "prefix" column.
inline constexpr const char* kPrefixOffset = "prefixOffset";
inline constexpr const char* kPrefixBefore66 = "prefix";
// Every column of the table (besides length).
inline constexpr const char* kAll[] = {kFrame, kPrefixOffset};
}  // namespace stacks

// threads[i]
namespace thread {
inline constexpr const char* kName = "name";
inline constexpr const char* kProcessName = "processName";
inline constexpr const char* kProcessType = "processType";
inline constexpr const char* kIsMainThread = "isMainThread";
inline constexpr const char* kPid = "pid";
inline constexpr const char* kTid = "tid";
inline constexpr const char* kProcessStartupTime = "processStartupTime";
inline constexpr const char* kProcessShutdownTime = "processShutdownTime";
inline constexpr const char* kRegisterTime = "registerTime";
inline constexpr const char* kUnregisterTime = "unregisterTime";
inline constexpr const char* kPausedRanges = "pausedRanges";
inline constexpr const char* kSamples = "samples";
inline constexpr const char* kMarkers = "markers";
// Every key the writer gives a thread object.
inline constexpr const char* kAll[] = {kName,
                                       kProcessName,
                                       kProcessType,
                                       kIsMainThread,
                                       kPid,
                                       kTid,
                                       kProcessStartupTime,
                                       kProcessShutdownTime,
                                       kRegisterTime,
                                       kUnregisterTime,
                                       kPausedRanges,
                                       kSamples,
                                       kMarkers};
// Only on threads with sampled allocations (hpctl record --alloc).
inline constexpr const char* kNativeAllocations = "nativeAllocations";
}  // namespace thread

// threads[i].nativeAllocations: the profiler's "balanced" native allocations table (profile.ts,
// BalancedNativeAllocationsTable): an allocation weighs its bytes, a deallocation the negative of its
// allocation's, both with the block's address (the "Retained memory" view pairs them by address) and
// the thread that allocated or freed it; rows in time order (the profiler bisects the time column).
namespace native_allocations {
inline constexpr const char* kTime = "time";
inline constexpr const char* kWeight = "weight";
inline constexpr const char* kWeightType = "weightType";  // "bytes"
inline constexpr const char* kStack = "stack";
inline constexpr const char* kMemoryAddress = "memoryAddress";
inline constexpr const char* kThreadId = "threadId";
// Every column of the table (besides length and weightType).
inline constexpr const char* kAll[] = {kTime, kWeight, kStack, kMemoryAddress, kThreadId};
}  // namespace native_allocations

// threads[i].samples
namespace samples {
inline constexpr const char* kWeightType = "weightType";
inline constexpr const char* kWeight = "weight";
inline constexpr const char* kStack = "stack";
inline constexpr const char* kTime = "time";
inline constexpr const char* kTimeDeltas = "timeDeltas";
inline constexpr const char* kThreadCpuDelta = "threadCPUDelta";
}  // namespace samples

// threads[i].markers; data[k] is null or an object whose "type" names its meta.markerSchema entry.
namespace markers {
inline constexpr const char* kData = "data";
inline constexpr const char* kName = "name";
inline constexpr const char* kStartTime = "startTime";
inline constexpr const char* kEndTime = "endTime";
inline constexpr const char* kPhase = "phase";
inline constexpr const char* kCategory = "category";
inline constexpr const char* kDataType = "type";
// Every column of the table (besides length).
inline constexpr const char* kAll[] = {kData, kName, kStartTime, kEndTime, kPhase, kCategory};
}  // namespace markers

}  // namespace hpd::firefox
