// The request form: choosing a course preselects its default desktop profile, if it has one.
(function () {
  "use strict";
  const course = document.getElementById("id_course");
  if (!course) return;
  course.addEventListener("change", () => {
    const option = course.selectedOptions[0];
    const profile = option && option.dataset.defaultProfile;
    const radio = profile && document.getElementById("profile-" + profile);
    if (radio) radio.checked = true;
    const coursework = document.getElementById("purpose-coursework");
    if (course.value && coursework) coursework.checked = true;
  });
})();
