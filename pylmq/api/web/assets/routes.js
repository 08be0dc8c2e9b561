// The pages of work item D (queue page, default props). Owner: work item D.
// app.js imports this module once at boot, after app.js itself has run, so the modules imported
// here may import route/poller/showError/session from app.js at their top level (no cycle
// problem).
import { route } from "./app.js";
import { defaultsView } from "./defaults.js";
import { queueView } from "./queue.js";

route("/queue/:name", queueView);
route("/defaults", defaultsView);
